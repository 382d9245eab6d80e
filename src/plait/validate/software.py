"""What the software of a measured run did, where its source documents it.

A run's step time depends on its framework as well as its layout. Where a source
documents a property the CSV has no column for, it is recorded here with the reason;
every other source gets the modern defaults (flash attention, no dropout, gradient
reduction overlapped with the backward pass). These are categorical facts about the
code that ran, never numbers tuned to the measured times.
"""

from __future__ import annotations

from dataclasses import dataclass

from plait.cost.setup import AttentionKernel


@dataclass(frozen=True, kw_only=True)
class Software:
    """Framework behaviour of one source's runs."""

    attention_kernel: AttentionKernel = "flash"
    """Fused flash attention, or unfused batched GEMMs + softmax."""
    dropout: bool = False
    """Hidden and attention dropout active."""
    overlap_grad_reduce: bool = True
    """Data-parallel gradient reduction overlapped with the backward pass."""
    sequence_parallel: bool | None = None
    """Whether sequence parallelism existed/was used (``None``: unknown, filled by the knob rule)."""
    why: str = "default: current frameworks (FlashAttention-2 or later, no dropout, overlapped gradient reduction)"
    """Where the facts come from."""


_MEGATRON_2021 = Software(
    attention_kernel="unfused",
    dropout=True,
    overlap_grad_reduce=False,
    why=("Megatron-LM as of 2021-22 predates FlashAttention (Dao et al., arXiv 2205.14135, May 2022): the attention "
         "core is batched GEMMs plus a fused scale-mask-softmax that stores the score matrix (Korthikanti et al. "
         "2022, Sec. 4.1 counts these 5as^2b bytes); GPT runs use dropout 0.1 (Megatron-LM defaults); the "
         "data-parallel all-reduce runs after the pipeline flush (Narayanan et al. 2021, Sec. 2.2; Korthikanti et "
         "al. 2022, Sec. 6.3: 'not overlapped')."),
)

SOFTWARE: dict[str, Software] = {
    "narayanan_sc21": Software(
        attention_kernel="unfused", dropout=True, overlap_grad_reduce=False, sequence_parallel=False,
        why=_MEGATRON_2021.why + " Sequence parallelism was introduced later (Korthikanti et al. 2022, Sec. 4.2.2).",
    ),
    "korthikanti_2022": _MEGATRON_2021,
}


def software_for(source: str) -> Software:
    """The documented software facts of ``source`` (modern defaults when none are recorded)."""
    return SOFTWARE.get(source, Software())

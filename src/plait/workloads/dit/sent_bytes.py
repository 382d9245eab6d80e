"""Bytes one GPU sends its peers under each DiT parallelism: what :mod:`plait.workloads.dit.cost` times and the
gloo runtime (:mod:`plait.workloads.dit.worker`) counts. ``tokens``: this GPU's tokens of the image;
``hidden``: the width it holds (``H / tp`` under tensor parallelism); ``passes``: the model passes it runs at once
(images, x 2 when it batches the guided pair); ``element_bytes``: 2 in bf16, 4 in the fp32 runtime."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from plait.workloads.dit.cost import DitPlan


def ulysses_sent_bytes(tokens: float, hidden: float, element_bytes: int, passes: float, degree: int) -> float:
    """Per layer under Ulysses: Q, K, V and the output, ``tokens x hidden`` each, of which ``(u - 1) / u`` leave
    (DeepSpeed-Ulysses: Jacobs et al., arXiv 2309.14509, Sec. 3.1)."""
    return 4 * tokens * hidden * element_bytes * passes * (degree - 1) / degree


def ring_sent_bytes(tokens: float, hidden: float, element_bytes: int, passes: float, degree: int) -> float:
    """Per layer under ring attention: the K, V block travels ``r - 1`` hops (Ring Attention: Liu et al., arXiv
    2310.01889, Sec. 3). Inside USP (Fang & Zhao, arXiv 2405.07719, Sec. 3) the block after Ulysses' all-to-all
    holds ``u`` times the tokens and ``1 / u`` of the heads: the same bytes."""
    return 2 * tokens * hidden * element_bytes * passes * (degree - 1)


def tp_sent_bytes(tokens: float, hidden: float, element_bytes: int, passes: float, degree: int) -> float:
    """Per layer under Megatron tensor parallelism: two all-reduces of the block's ``tokens x H`` output
    (attention and MLP; Shoeybi et al., arXiv 1909.08053, Sec. 3), each sending ``2 (t - 1) / t`` of it in the
    bandwidth-optimal ring (Patarasuk & Yuan, JPDC 2009), and the all-gather of the column-split adaLN
    modulation, ``6 H`` numbers a pass of which ``(t - 1) / t`` leave. ``hidden``: the whole width ``H``."""
    return (2 * 2 * tokens + 6) * hidden * element_bytes * passes * (degree - 1) / degree


def cfg_sent_bytes(tokens: float, patch_values: int, element_bytes: int, batch: int, degree: int) -> float:
    """Per step under CFG parallelism: this GPU's predicted velocity of its tokens for its pass (``batch``
    images) to the other pass's GPU (xDiT's CFG parallel: Fang et al., arXiv 2411.01738, Sec. 4.1)."""
    return tokens * patch_values * element_bytes * batch * (degree - 1)


def pipefusion_sent_bytes(tokens: float, hidden: float, element_bytes: int, passes: float) -> float:
    """Per step from a PipeFusion stage other than the last: every patch's hidden activations, ``tokens x H`` in
    all, to the next stage (PipeFusion: Wang et al., arXiv 2405.14430, Sec. 4)."""
    return tokens * hidden * element_bytes * passes


def pipefusion_return_bytes(tokens: float, patch_values: int, element_bytes: int, batch: int) -> float:
    """Per step but the last from PipeFusion's last stage: every patch's updated latent back to the first stage
    (xDiT's ``_async_pipeline`` sends it after the scheduler step, except in the last step)."""
    return tokens * patch_values * element_bytes * batch


def stale_kv_sent_bytes(tokens: float, hidden: float, element_bytes: int, passes: float, degree: int) -> float:
    """Per layer and gather under DistriFusion: this GPU's fresh K and V, ``tokens x hidden`` each, to each of the
    ``n - 1`` others (Li et al., CVPR 2024, Sec. 4.2)."""
    return 2 * tokens * hidden * element_bytes * passes * (degree - 1)


def stale_kv_gathers(steps: int, warmup: int) -> int:
    """All-gathers per layer over a generation: one per step, none after the last when it runs stale (nothing
    follows to use it); a synchronous warm-up step's gather serves the next step too."""
    return steps if warmup >= steps else steps - 1


def rank_sent_bytes(plan: DitPlan, *, image_tokens: int, hidden: int, patch_values: int, layers: int, batch: int,
                    steps: int, warmup: int, guided: bool, element_bytes: int) -> list[float]:
    """Bytes each GPU of ``plan`` sends over a whole generation, in the mesh order ``cfg x pipefusion x
    distrifusion x ring x ulysses x tp`` (tp innermost; plait's gloo runtime, :mod:`plait.workloads.dit.worker`).
    ``guided``: classifier-free guidance on (both passes batched on a GPU unless ``cfg`` = 2)."""
    passes = batch * (2 if guided and plan.cfg == 1 else 1)
    tokens = image_tokens / (plan.distrifusion * plan.ring * plan.ulysses)
    cfg = cfg_sent_bytes(tokens, patch_values, element_bytes, batch, plan.cfg) if plan.cfg > 1 else 0.0
    if plan.pipefusion > 1:  # Ulysses and ring inside each stage, over its layers; the ring once per patch
        passes_of_ring = min(warmup, steps) + (steps - min(warmup, steps)) * plan.patches
        uly = layers / plan.pipefusion * (
            steps * ulysses_sent_bytes(tokens, hidden, element_bytes, passes, plan.ulysses)
            + passes_of_ring * ring_sent_bytes(tokens, hidden, element_bytes, passes, plan.ring))
        stages = [uly + steps * pipefusion_sent_bytes(tokens, hidden, element_bytes, passes)] * (plan.pipefusion - 1)
        stages.append(uly + (steps - 1) * pipefusion_return_bytes(tokens, patch_values, element_bytes, batch)
                      + steps * cfg)
        return [stages[g // (plan.gpus // plan.cfg // plan.pipefusion) % plan.pipefusion] for g in range(plan.gpus)]
    part = hidden / plan.tp
    per_layer = sum(fn(tokens, width, element_bytes, passes, degree) for fn, width, degree in (
        (ulysses_sent_bytes, part, plan.ulysses), (ring_sent_bytes, part, plan.ring), (tp_sent_bytes, hidden, plan.tp)))
    total = steps * layers * per_layer + steps * cfg
    if plan.distrifusion > 1:
        total += layers * stale_kv_gathers(steps, warmup) * stale_kv_sent_bytes(tokens, hidden, element_bytes, passes,
                                                                                plan.distrifusion)
    return [total] * plan.gpus

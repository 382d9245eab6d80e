"""Training data with no downloads: CPython's own documentation, byte-level tokens.

``pydoc_data.topics`` ships with every CPython (the text of ``help()`` topics, ~465 kB of
English prose and code). Bytes are the tokens (vocabulary 256). Batches are a pure
function of (step, row), so every rank, every layout and a resumed run see the same data.
"""

from __future__ import annotations

import functools

import torch

VOCAB_SIZE = 256


@functools.cache
def corpus() -> torch.Tensor:
    """The corpus as a uint8 tensor."""
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[key] for key in sorted(topics))
    return torch.frombuffer(bytearray(text.encode("utf-8")), dtype=torch.uint8).clone()


def global_batch(step: int, batch: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of shape ``[batch, seq_len]`` for optimizer step ``step``."""
    data = corpus()
    span = data.numel() - seq_len - 1
    starts = [((step * batch + row) * seq_len * 7919) % span for row in range(batch)]  # 7919: prime stride
    rows = torch.stack([data[s:s + seq_len + 1] for s in starts]).long()
    return rows[:, :-1], rows[:, 1:]


def rank_slice(tensor: torch.Tensor, dp_rank: int, dp: int) -> torch.Tensor:
    """This data-parallel rank's rows of a global batch."""
    per_rank = tensor.shape[0] // dp
    return tensor[dp_rank * per_rank:(dp_rank + 1) * per_rank]

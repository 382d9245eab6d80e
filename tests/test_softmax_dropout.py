"""A softmax and the dropout on its output as one kernel each way (:mod:`plait.workloads.traced.softmax_dropout`):
BERT's attention probabilities as pytorch:21.11's NVFuser runs them, hand-counted per element of bf16 scores."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from plait.workload import zoo  # noqa: E402
from plait.workloads.traced.tracing import trace_factory  # noqa: E402

SCORES = 16 * 128 * 128
"""Attention scores of one example in one BERT-large layer: 16 heads of 128 x 128."""


def _traced(layers: int, fused: bool):  # type: ignore[no-untyped-def]
    def factory():  # type: ignore[no-untyped-def]
        return zoo._bert_large("fused_softmax", num_layers=layers)

    factory.fused_softmax_dropout = fused  # type: ignore[attr-defined]
    return trace_factory(factory, f"bert{layers}", (128,), "int64", "bfloat16")


@pytest.mark.parametrize("layers", [1, 2])
def test_the_fused_kernel_moves_the_scores_once_and_keeps_what_the_backward_reads(layers: int) -> None:
    """Forward: scores in (2 bytes), probabilities, dropped probabilities (2 + 2) and mask (1) out: 7 bytes a score.
    Backward: the gradient, the mask and the probabilities in (2 + 1 + 2), the scores' gradient out (2): 7. The
    separate kernels move 2 + 2 and 2 + 2 + 1 forward, 2 + 1 + 2 and 2 + 2 + 2 backward: the probabilities and their
    gradient once more each way. One layer is traced as its model's children (every backward kernel in the last
    unit), two as layers."""
    fused, plain = _traced(layers, True), _traced(layers, False)

    def kernels(work, name, backward):  # type: ignore[no-untyped-def]
        return [k for u in work.units for k in u.kernels if k.name == name and k.backward == backward]

    assert [k.bytes_per_example for k in kernels(fused, "_softmax", False)] == [7 * SCORES] * layers
    assert [k.bytes_per_example for k in kernels(fused, "_softmax_backward_data", True)] == [7 * SCORES] * layers
    for name, backward in (("native_dropout", False), ("native_dropout_backward", True)):
        kept = kernels(fused, name, backward)
        assert len(kept) == len(kernels(plain, name, backward)) - layers  # the hidden dropouts stay
        assert all(k.bytes_per_example == 5 * 128 * 1024 for k in kept)  # 128 x 1024 bf16 in and out, a byte mask
    saved = sum(k.bytes(1) for u in plain.units for k in u.kernels) - sum(k.bytes(1) for u in fused.units
                                                                            for k in u.kernels)
    assert saved == pytest.approx(layers * (2 + 4) * SCORES)


def test_the_nvfuser_factories_declare_the_fusion_and_the_others_do_not() -> None:
    assert zoo.bert_large_fused_softmax.fused_softmax_dropout is True  # type: ignore[attr-defined]
    assert zoo.bert_large_fused_softmax_dense_mlm.fused_softmax_dropout is True  # type: ignore[attr-defined]
    assert not getattr(zoo.bert_large_unfused, "fused_softmax_dropout", False)
    assert not getattr(zoo.bert_large, "fused_softmax_dropout", False)

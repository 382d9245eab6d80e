"""Tensor parallelism of a traced module's self-attention by heads (:mod:`plait.workloads.traced.attention`): which
attentions are found and which refused (with the reason), and what tp costs and saves on ``small_transformer``
(hand-computed: 8 positions of 32 features, 4 query and 2 key/value heads of 8, a 32 -> 128 -> 32 MLP per block).
Parity with one process on 2 gloo ranks, with the bytes counted: ``tests/test_traced_run.py``."""

from __future__ import annotations

import pytest

from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.plan.plan import Plan
from plait.sync import ALLREDUCE

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

from plait.workloads.traced.attention import find_attention  # noqa: E402
from plait.workloads.traced.cost import collective_bytes_per_step, estimate_traced  # noqa: E402
from plait.workloads.traced.pairs import trace_units  # noqa: E402
from plait.workloads.traced.search import search_traced  # noqa: E402
from plait.workloads.traced.tensor_parallel import split_unit  # noqa: E402
from plait.workloads.traced.tracing import trace  # noqa: E402

SMALL = "plait.workload.zoo:small_transformer"


class _Attention(nn.Module):
    """Self-attention of 16 features in heads of 4, written as ``kind`` says."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.q, self.k, self.v, self.o = (nn.Linear(16, 16) for _ in range(4))
        self.qkv, self.drop = nn.Linear(16, 48), nn.Dropout(0.0)

    def forward(self, x, other):  # type: ignore[no-untyped-def]
        b, s = x.shape[:2]
        if self.kind == "fused":  # one Linear for q, k and v, its output split in three
            q, k, v = self.qkv(x).split(16, dim=-1)
            q, k, v = (t.reshape(b, s, -1, 4).transpose(1, 2) for t in (q, k, v))
        else:
            source = other if self.kind == "cross" else x  # keys and values from another input
            heads = 4 if self.kind == "fixed" else -1  # a fixed head count cannot hold heads / tp on a rank
            q = self.q(x).view(b, s, heads, 4).transpose(1, 2)
            k, v = (w(source).view(b, s, heads, 4).transpose(1, 2) for w in (self.k, self.v))
        if self.kind == "matmul":  # the core written out: softmax(q k^T / sqrt(d)) v
            o = torch.matmul(self.drop(F.softmax(torch.matmul(q, k.transpose(-2, -1)) / 2.0, dim=-1)), v)
        else:
            o = F.scaled_dot_product_attention(q, k, v)
        return self.o(o.transpose(1, 2).reshape(b, s, -1))


class _Block(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.attention = _Attention(kind)

    def forward(self, x, other):  # type: ignore[no-untyped-def]
        return x + self.attention(x, other)


@pytest.mark.parametrize(("kind", "why"), [
    ("sdpa", ""), ("matmul", ""),
    ("fixed", "views a fixed shape [4, 4]: write -1 for the head count"),
    ("fused", "reads 1 Linear outputs, not three (q, k, v); a fused q/k/v projection is not split"),
    ("cross", "do not read the same input (cross-attention is not split)"),
])
def test_attention_is_found_from_the_data_flow_or_refused_in_one_line(kind: str, why: str) -> None:
    model = nn.Sequential(_Block(kind), _Block(kind))
    found, refused = find_attention(trace_units(model, ["0", "1"]))
    if not why:
        # q, k, v weights and biases and o's weight: 3 x (16 x 16 + 16) + 16 x 16; 4 heads each; the core in the
        # attention module, which holds no other parameters (the unused fused Linear aside: so "" for it)
        assert found[0][:6] == (1, "0.attention.q", "0.attention.o", 16, 3 * (16 * 16 + 16) + 16 * 16,
                                ("0.attention.k", "0.attention.v"))
        assert found[0][6:] == ((4, 4, 4), "") and len(found) == 2 and not refused
    else:
        assert not found and why in refused[0] and refused[0].startswith("0.attention.o: ")


@pytest.fixture(scope="module")
def small():  # type: ignore[no-untyped-def]
    return trace(SMALL, None, None, "float32")


def test_small_transformer_splits_each_attention_by_heads(small) -> None:  # type: ignore[no-untyped-def]
    attention = [p for p in small.pairs if p.heads]
    assert [(p.unit, p.first, p.gates, p.second, p.heads, p.core) for p in attention] == [
        (i, f"{i}.attention.wq", (f"{i}.attention.wk", f"{i}.attention.wv"), f"{i}.attention.wo", (4, 2, 2),
         f"{i}.attention") for i in (1, 2)]
    # wq 32 x 32 + 32, wk and wv 32 x 16 + 16 each, wo 32 x 32; the output 32 fp32 features per position
    assert {(p.split_params, p.output_bytes_per_example) for p in attention} == {(1056 + 2 * 528 + 1024, 8 * 32 * 4.0)}


def test_each_rank_runs_half_of_a_blocks_gemms_and_attention(small) -> None:  # type: ignore[no-untyped-def]
    """A block's forward FLOPs per example, by hand: q and o 2 x 8 x 32 x 32 each, k and v 2 x 8 x 32 x 16 each,
    the core 2 x 2 x heads x 8 x 8 x 8 (scores and their product with v), fc1 and fc2 2 x 8 x 32 x 128 each; with
    tp=2 each rank runs half of all of it (no GEMM of the block is left whole)."""
    forward = 2 * 16384 + 2 * 8192 + 4 * 4 * 8 * 8 * 8 + 2 * 65536
    block = small.units[1]
    assert block.flops(1, False) == forward
    assert split_unit(block, 2).flops(1, False) == forward / 2


def test_each_rank_copies_half_of_the_repeated_heads(small) -> None:  # type: ignore[no-untyped-def]
    """The forward's memory-bound operators inside the attention module: repeat_interleave's two copies of k and v
    to 4 heads of 8 x 8 fp32 (1,024 bytes written, the expanded view read: 2,048 per example each), split with the
    heads; the norms outside stay whole."""
    block = small.units[1]
    copies = [k.bytes_per_example for k in block.kernels
              if k.tp_split_all and not k.backward and not k.flops_per_example]
    assert copies == [2048.0, 2048.0]
    half = split_unit(block, 2)
    assert [k.bytes_per_example for k in half.kernels if k.tp_split_all and not k.backward
            and not k.flops_per_example] == [1024.0, 1024.0]
    norms = [k for k in block.kernels if "layer_norm" in k.name]
    assert norms and norms == [k for k in half.kernels if "layer_norm" in k.name]


def test_tp_splits_the_saved_activations_of_attention_and_row_linears(small) -> None:  # type: ignore[no-untyped-def]
    """Split per example, by hand: q, the repeated k and v and the attention's output (8 x 32 fp32 each), its
    log-sum-exp (4 heads x 8 fp32) and fc2's input (8 x 128 fp32); the rest (the norms' and the column Linears'
    whole inputs, GELU's input) whole."""
    block = small.units[1]
    assert block.split_saved_bytes_per_example == 4 * 1024 + 128 + 4096
    assert block.saved_bytes(1, 2) == block.saved_bytes(1) - (4 * 1024 + 128 + 4096) / 2


def _plan(tp: int, **knobs):  # type: ignore[no-untyped-def]
    return Plan(tp=tp, sp=False, micro_batch=2, global_batch=8, precision="fp32", optimizer="adamw", **knobs)


def test_tp_adds_two_all_reduces_per_attention_as_per_pair(small) -> None:  # type: ignore[no-untyped-def]
    """4 micro-batches x 2 blocks x (attention + MLP) x 2 all-reduces (forward, backward) x 2 examples x 8 x 32 fp32:
    what rank 0 counts in ``tests/test_traced_run.py``."""
    assert collective_bytes_per_step(small, _plan(2)) == (4 * 2 * 2 * 2 * 2 * 8 * 32 * 4, 0.0)


def test_tp_the_heads_do_not_allow_is_refused_in_one_line(small) -> None:  # type: ignore[no-untyped-def]
    from plait.predict.intervals import step_interval_s

    with pytest.raises(ConfigError, match=r"tp=4 must divide the head counts 4/2/2 \(q/k/v\) of the attention "
                                          r"1.attention.wq -> 1.attention.wo"):
        estimate_traced(small, get_cluster("dgx-h100-ib"), _plan(4), get_engine("plait"), step_interval_s)


def test_the_planner_searches_tp_over_pairs_and_attention(small) -> None:  # type: ignore[no-untyped-def]
    found = search_traced(small, get_cluster("dgx-h100-ib"), 4, 64, (ALLREDUCE,), get_engine("plait"))
    assert "tp=2 searched over 2 Linear pair(s) and 2 attention(s) split by heads (split dimensions [2, 4, 128])" \
        in found.tp_note
    assert {e.plan.tp for e in found.ranked} >= {2}

"""Full recomputation under PyTorch's non-reentrant checkpoint with early stop (plait.cost.early_stop)."""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

from plait.cost.layer import layer_cost
from plait.cost.setup import Setup
from plait.engine.catalog import get_engine
from plait.hardware.catalog import cluster_from_mapping
from plait.plan.plan import Plan
from plait.workload.model import ModelSpec
from tests.conftest import toy_cluster_mapping

GEMMS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default}


class _CountGemms(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.count += func in GEMMS
        return func(*args, **(kwargs or {}))


class _Block(torch.nn.Module):
    """MPT's block shape (llm-foundry MPTBlock, MPTMLP): x + out(qkv(norm(x))), then x + down(gelu(up(norm(x))))."""

    def __init__(self, h: int = 8) -> None:
        super().__init__()
        self.norm_1, self.norm_2 = torch.nn.LayerNorm(h), torch.nn.LayerNorm(h)
        self.qkv, self.out = torch.nn.Linear(h, 3 * h, bias=False), torch.nn.Linear(h, h, bias=False)
        self.up, self.down = torch.nn.Linear(h, 4 * h, bias=False), torch.nn.Linear(4 * h, h, bias=False)

    def forward(self, x):  # type: ignore[no-untyped-def]
        x = x + self.out(self.qkv(self.norm_1(x))[..., : x.shape[-1]])
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm_2(x))))


@pytest.mark.slow  # its first non-reentrant checkpoint imports torch._dynamo (several seconds)
def test_non_reentrant_checkpoint_does_not_rerun_the_last_gemm() -> None:
    """The backward of a checkpointed block runs its 8 gradient GEMMs (input and weight gradient of 4 projections)
    and recomputes 3 of the 4 forward GEMMs: the down projection, whose inputs are the last tensors saved, stops
    the recomputation before its kernel."""
    block, x = _Block(), torch.randn(2, 3, 8, requires_grad=True)
    out = checkpoint(block, x, use_reentrant=False)
    recomputed = _CountGemms()
    with recomputed:
        out.sum().backward()
    assert recomputed.count == 8 + 3


def _setup(precision: str, early_stop: bool, engine: str = "llm-foundry") -> Setup:
    model = ModelSpec(
        name="toy",
        num_layers=1,
        hidden_size=1024,
        num_heads=8,
        num_kv_heads=8,
        head_dim=128,
        ffn_hidden_size=4096,
        vocab_size=1024,
        seq_len=4096,
        mlp="plain",
        norm="layernorm",
        position="learned",
    )
    framework = replace(get_engine(engine).framework, recompute_early_stop=early_stop)
    plan = Plan(recompute="full", precision=precision).with_seq_len(4096)  # type: ignore[arg-type]
    return Setup(
        model=model, cluster=cluster_from_mapping(toy_cluster_mapping(), "toy"), plan=plan, framework=framework
    )


@pytest.mark.parametrize(
    ("precision", "saved_s"),
    [
        # down projection 4096 x 1024 x 4096 in bf16 moves 2 (4096 x 4096 + 4096 x 1024) + 2 (4096 x 1024) bytes,
        # 50.33 us at 1000 GB/s (above its 34.36 us of FLOPs at 1000 TFLOP/s); the residual add 3 x 2 x 4096 x 1024
        # bytes, 25.17 us
        ("bf16", (2 * (4096 * 4096 + 4096 * 1024) + 2 * 4096 * 1024 + 6 * 4096 * 1024) / 1e12),
        ("fp8", 6 * 4096 * 1024 / 1e12),  # Transformer Engine's fp8 Linear saves after its GEMM: the add alone
    ],
)
def test_early_stop_skips_the_down_projection_and_the_last_add(precision: str, saved_s: float) -> None:
    whole = layer_cost(_setup(precision, False), False)
    stopped = layer_cost(_setup(precision, True), False)
    assert whole.recompute_s == pytest.approx(whole.fwd_compute_s)
    assert whole.recompute_s - stopped.recompute_s == pytest.approx(saved_s)


def test_the_torch_1_13_foundry_tables_recompute_the_whole_block() -> None:
    """llm-foundry's May-2023 tables ran on torch 1.13.1, before early stop (engines.toml ``llm-foundry@2023-05``):
    its facts recompute the whole forward; the torch 2.1 rows' (plain ``llm-foundry``) stop before the last GEMM."""
    old = get_engine("llm-foundry@2023-05").framework.recompute_early_stop
    whole = layer_cost(_setup("bf16", old, "llm-foundry@2023-05"), False)
    assert whole.recompute_s == pytest.approx(whole.fwd_compute_s)
    assert get_engine("llm-foundry").framework.recompute_early_stop

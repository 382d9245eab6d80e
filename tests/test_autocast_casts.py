"""The casts torch.autocast adds to a layer of plait's runtime, counted on the real module and by the cost model.

The expected side is measured, not taken from the code under test: every ``aten._to_copy`` of a forward pass of
plait's own model under ``torch.autocast`` is intercepted (a ``TorchDispatchMode``), and the per-layer bytes are
the slope between a 1-layer and a 2-layer model (the embedding and output head cancel).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from plait.cost.layer import autocast_bytes_fwd  # noqa: E402
from plait.cost.setup import Setup  # noqa: E402
from plait.engine.catalog import get_engine  # noqa: E402
from plait.hardware.catalog import get_cluster  # noqa: E402
from plait.plan.plan import Plan  # noqa: E402
from plait.workload.catalog import resolve_model  # noqa: E402

ROOT = Path(__file__).parents[1]
BATCH, SEQ = 2, 64


class _Casts(TorchDispatchMode):
    """Bytes read plus written by every dtype cast dispatched, and the shapes cast."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes, self.shapes = 0, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten._to_copy.default and args[0].dtype != out.dtype:
            self.bytes += args[0].numel() * args[0].element_size() + out.numel() * out.element_size()
            self.shapes.append(tuple(args[0].shape))
        return out


def _forward_casts(layers: int) -> _Casts:
    from plait.run.model import build_model

    spec = replace(resolve_model(str(ROOT / "examples" / "small-model.toml")), num_layers=layers)
    model = build_model(spec, SEQ, 0)
    casts = _Casts()
    with casts, torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.randint(0, spec.vocab_size, (BATCH, SEQ)))
    return casts


def test_autocast_casts_of_a_layer_are_the_ones_the_runtime_makes() -> None:
    """Small-model shapes (hidden 256, 4 query and 2 K/V heads of 64, gated MLP of 768): per layer the runtime
    casts the normed hidden state 5 times (wq, wk, wv, w1, w3) and each of the 7 projection weights once; the
    cost model charges exactly that. Not charged: the 4 casts of the rotary tables (``SEQ x head_dim / 2`` each)
    that ``apply_rope`` makes, ``(4 x head_dim / 2) / (5 x micro_batch x hidden)`` of the hidden-state casts:
    2.5% for this model at micro-batch 4, 1.25% for Llama 3 8B at micro-batch 1."""
    one, two = _forward_casts(1), _forward_casts(2)
    measured = two.bytes - one.bytes
    spec = resolve_model(str(ROOT / "examples" / "small-model.toml"))
    plan = Plan(micro_batch=BATCH, global_batch=BATCH).with_seq_len(SEQ)
    setup = Setup(model=spec, cluster=get_cluster("dgx-h100-ib"), plan=plan, framework=get_engine("plait").framework)
    rope_tables = 4 * SEQ * spec.head_dim // 2 * (4 + 2)
    assert setup.residual_bytes == 4  # autocast on fp32 parameters: the rows these casts belong to
    assert measured == autocast_bytes_fwd(setup, False) + rope_tables
    assert two.shapes.count((BATCH, SEQ, spec.hidden_size)) - one.shapes.count((BATCH, SEQ, spec.hidden_size)) == 5


def test_fsdp_rows_and_fused_projections_cast_less() -> None:
    """FSDP2 casts the parameters itself (bf16 residual stream: no autocast casts are charged), and fused q/k/v
    and gate/up projections cast the hidden state twice per layer instead of five times."""
    from plait.cost.flops import layer_gemms
    from plait.cost.layer import _elementwise_bytes_fwd

    spec = resolve_model(str(ROOT / "examples" / "small-model.toml"))
    framework = get_engine("plait").framework
    cluster = get_cluster("dgx-h100-ib")

    def moved(plan: Plan, fw=framework) -> float:  # type: ignore[no-untyped-def]
        setup = Setup(model=spec, cluster=cluster, plan=plan.with_seq_len(SEQ), framework=fw)
        return _elementwise_bytes_fwd(setup, layer_gemms(setup, False), False)

    ddp = Plan(dp_replicate=2, micro_batch=BATCH, global_batch=2 * BATCH)
    fsdp = Plan(dp_shard=2, sharding="zero3", micro_batch=BATCH, global_batch=2 * BATCH)
    plain = replace(framework, residual_bytes=2)
    assert moved(fsdp) == moved(fsdp, plain)
    stream = BATCH * SEQ * spec.hidden_size
    fused = replace(framework, fused_input_projections=True)
    assert moved(ddp) - moved(ddp, fused) == pytest.approx((5 - 2) * (4 + 2) * stream)

"""Any PyTorch module as a workload (issue 17): a module traced on the meta device against the closed forms plait
keeps for its catalog transformers, and against published figures of ResNet-50."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from plait.cost import activations as act
from plait.cost.flops import model_flops_per_token
from plait.cost.setup import Setup
from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.plan.plan import Plan
from plait.workload.catalog import get_model

torch = pytest.importorskip("torch")

from plait.run.model import Transformer
from plait.workload.tracing import trace, trace_factory


def _traced_catalog(name: str, seq: int):  # type: ignore[no-untyped-def]
    """The catalog model as plait's reference module builds it (its own output head: untied)."""
    spec = replace(get_model(name), seq_len=seq, tied_embeddings=False)
    return spec, trace_factory(lambda: Transformer(spec, seq), name, (seq,), "int64")


@pytest.mark.parametrize("name, seq", [("llama3-8b", 8192), ("gpt3-175b", 2048)])
def test_traced_catalog_transformer_agrees_with_the_closed_forms(name: str, seq: int) -> None:
    """Parameters exact, FLOPs within 1%, each layer's saved activations within 5% of plait's closed forms for the
    engine that runs this module (plait's runtime: eager pointwise ops, K/V repeated before attention; bf16 as
    under FSDP2's mixed precision). The closed form counts model FLOPs (PaLM's 6N + 12LHQT per token: a backward
    of twice the forward); FlashAttention's backward also recomputes the scores, one S x S x d product per layer
    more (2 S^2 d FLOPs), which the trace counts (PyTorch's formula for ``_flash_attention_backward``)."""
    spec, traced = _traced_catalog(name, seq)
    assert traced.total_params() == spec.total_params()
    assert traced.unit_class == "Block" and len(traced.units) == spec.num_layers + 2
    plan = Plan(global_batch=1, micro_batch=1, seq_len=seq, sharding="zero3")
    setup = Setup(model=spec, cluster=get_cluster("dgx-h100-ib"), plan=plan, framework=get_engine("plait").framework)
    model_flops = model_flops_per_token(setup) * seq
    assert traced.flops_per_example(backward=False) == pytest.approx(model_flops / 3, rel=0.01)
    recomputed = spec.num_layers * 2 * seq**2 * spec.num_heads * spec.head_dim
    assert traced.flops_per_example() == pytest.approx(model_flops + recomputed, rel=0.01)
    for unit in traced.units[1:-1]:
        assert unit.saved_bytes(1) == pytest.approx(act.layer_bytes(setup, False), rel=0.05)


def test_gradients_complete_from_the_head_back_to_the_embedding() -> None:
    spec, traced = _traced_catalog("llama3-8b", 256)
    order = traced.grad_order
    assert order[0] == "output.weight" and order[-1] == "tok_embeddings.weight"
    assert sorted(order) == sorted(name for name, _ in traced.named_params)
    last_layer = [i for i, n in enumerate(order) if n.startswith(f"layers.{spec.num_layers - 1}.")]
    first_layer = [i for i, n in enumerate(order) if n.startswith("layers.0.")]
    assert max(last_layer) < min(first_layer)


def test_resnet50_matches_its_published_size() -> None:
    """torchvision's model table (docs.pytorch.org/vision/stable/models.html, ResNet50_Weights.IMAGENET1K_V1):
    25,557,032 parameters and 4.09 GFLOPS per 224 x 224 image, counted as multiply-adds (a multiply-add is two
    FLOPs in PyTorch's FlopCounterMode, whose formulas the trace uses)."""
    pytest.importorskip("transformers")
    traced = trace("plait.workload.zoo:resnet50")
    assert traced.total_params() == 25_557_032
    assert traced.flops_per_example(backward=False) == pytest.approx(2 * 4.09e9, rel=0.01)
    assert traced.flops_per_example(backward=True) == pytest.approx(2 * traced.flops_per_example(False), rel=0.03)


@pytest.mark.parametrize("name, rule", [
    ("no_such_module_xyz:build", "module 'no_such_module_xyz' does not import"),
    ("plait.workload.zoo:nothing", "has no callable 'nothing'"),
    ("math:pi", "has no callable 'pi'"),
])
def test_bad_factories_are_refused_in_one_line(name: str, rule: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(rule)) as caught:
        trace(name, (4,))
    assert "\n" not in str(caught.value)


def test_a_factory_that_builds_no_module_is_refused() -> None:
    with pytest.raises(ConfigError, match="not a torch.nn.Module"):
        trace_factory(lambda: 3, "three", (4,))
    with pytest.raises(ConfigError, match="give --input-shape"):
        trace_factory(lambda: torch.nn.Linear(4, 4), "linear")

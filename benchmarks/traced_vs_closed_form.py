"""A catalog transformer traced on the meta device next to plait's closed forms: the figures that
tests/test_traced.py bounds (parameters exact, FLOPs within 1%, each layer's saved activations within 5%).

Run: python benchmarks/traced_vs_closed_form.py        (seconds; no GPU)

The closed forms are PaLM's model FLOPs (6N + 12LHQT per token, :mod:`plait.cost.flops`) plus the scores that
FlashAttention's backward recomputes (2 S^2 d per layer, which the trace counts through PyTorch's
``_flash_attention_backward`` formula), and the activation bytes of :mod:`plait.cost.activations` for plait's own
runtime (eager pointwise ops, bf16), the engine that runs the traced module.
"""

from __future__ import annotations

from dataclasses import replace


def main() -> int:
    from plait.cost import activations as act
    from plait.cost.flops import model_flops_per_token
    from plait.cost.setup import Setup
    from plait.engine.catalog import get_engine
    from plait.hardware.catalog import get_cluster
    from plait.plan.plan import Plan
    from plait.run.model import Transformer
    from plait.workload.catalog import get_model
    from plait.workloads.traced.tracing import trace_factory

    print(f"{'model':<12} {'seq':>5} {'params traced':>16} {'closed form':>16} {'fwd FLOPs':>9} "
          f"{'total FLOPs':>11} {'layer act. min..max':>20}")
    for name, seq in (("llama3-8b", 8192), ("gpt3-175b", 2048)):
        spec = replace(get_model(name), seq_len=seq, tied_embeddings=False)
        traced = trace_factory(lambda spec=spec, seq=seq: Transformer(spec, seq), name, (seq,), "int64")
        plan = Plan(global_batch=1, micro_batch=1, seq_len=seq, sharding="zero3")
        setup = Setup(model=spec, cluster=get_cluster("dgx-h100-ib"), plan=plan,
                      framework=get_engine("plait").framework)
        model_flops = model_flops_per_token(setup) * seq
        recomputed = spec.num_layers * 2 * seq**2 * spec.num_heads * spec.head_dim
        forward = traced.flops_per_example(backward=False) / (model_flops / 3) - 1
        total = traced.flops_per_example() / (model_flops + recomputed) - 1
        layer = act.layer_bytes(setup, False)
        ratios = [unit.saved_bytes(1) / layer - 1 for unit in traced.units[1:-1]]
        print(f"{name:<12} {seq:>5} {traced.total_params():>16,} {spec.total_params():>16,} {forward:>+9.2%} "
              f"{total:>+11.2%} {min(ratios):>+9.2%}..{max(ratios):+.2%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The parameter tensors of a dense transformer as PyTorch modules hold them, in registration order.

The layout of plait's runtime (``plait.run.model``) and of torchtitan's Llama: separate ``wq``/``wk``/``wv``/
``wo`` and ``w1``/``w2``/``w3``, each ``nn.Linear`` weight stored ``(out_features, in_features)``. What a
gradient-compression method sends depends on these shapes (PowerSGD views each as ``shape[0] x rest``), so the
cost model reads them here rather than from fused-matrix parameter counts.
"""

from __future__ import annotations

from plait.errors import ConfigError
from plait.workload.model import ModelSpec

Shape = tuple[int, ...]


def parameter_shapes(model: ModelSpec) -> list[tuple[str, Shape]]:
    """(name, shape) of every parameter of ``model``, as ``Transformer.named_parameters()`` lists them."""
    if model.moe or model.mla or model.qk_norm:
        raise ConfigError(f"{model.name}: parameter shapes are listed for dense models with standard attention only")
    h, f, v = model.hidden_size, model.ffn_hidden_size, model.vocab_size
    q, kv = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim

    def norm(name: str) -> list[tuple[str, Shape]]:
        return [(f"{name}.weight", (h,))] + ([(f"{name}.bias", (h,))] if model.norm_bias else [])

    def linear(name: str, out: int, inp: int, bias: bool) -> list[tuple[str, Shape]]:
        return [(f"{name}.weight", (out, inp))] + ([(f"{name}.bias", (out,))] if bias else [])

    shapes = [("tok_embeddings.weight", (v, h))]
    if model.position == "learned":
        shapes.append(("pos_embeddings.weight", (model.seq_len, h)))
    for i in range(model.num_layers):
        p, ab, mb = f"layers.{i}", model.attention_bias, model.mlp_bias
        shapes += norm(f"{p}.attention_norm")
        shapes += linear(f"{p}.attention.wq", q, h, ab) + linear(f"{p}.attention.wk", kv, h, ab)
        shapes += linear(f"{p}.attention.wv", kv, h, ab) + linear(f"{p}.attention.wo", h, q, ab)
        shapes += norm(f"{p}.ffn_norm")
        shapes += linear(f"{p}.feed_forward.w1", f, h, mb) + linear(f"{p}.feed_forward.w2", h, f, mb)
        if model.mlp == "gated":
            shapes += linear(f"{p}.feed_forward.w3", f, h, mb)
    shapes += norm("norm")
    if not model.tied_embeddings:
        shapes.append(("output.weight", (v, h)))
    return shapes

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


COLUMN_WISE = ("attention.wq", "attention.wk", "attention.wv", "feed_forward.w1", "feed_forward.w3", "output",
               "tok_embeddings")
"""Modules whose weights (and biases) tensor parallelism shards along dim 0: Megatron's column-parallel
linears (Shoeybi et al. 2019), the vocab-parallel embedding and output head (``plait.run.parallel.apply_tp``:
``ColwiseParallel``, and ``RowwiseParallel`` on an ``nn.Embedding``, which shards its weight ``Shard(0)``)."""
ROW_WISE = ("attention.wo", "feed_forward.w2")
"""Modules whose weights tensor parallelism shards along dim 1, their biases replicated (row-parallel)."""


def _chunk(size: int, parts: int, index: int) -> int:
    """Length of chunk ``index`` of ``size`` split in ``parts`` as ``torch.chunk`` does (DTensor ``Shard``)."""
    step = -(-size // parts)
    return max(0, min(step, size - index * step))


def rank_shapes(model: ModelSpec, tp: int = 1, tp_rank: int = 0, num_layers: int | None = None,
                first: bool = True, last: bool = True) -> list[tuple[str, Shape]]:
    """(name, local shape) of the parameters one rank holds: a pipeline stage of ``num_layers`` layers (all when
    ``None``) with the embeddings when ``first`` and the final norm and head when ``last``, each tensor as tensor
    parallelism of degree ``tp`` leaves it on TP rank ``tp_rank`` (norms and position embeddings replicated). Every
    layer has the same tensors, so a stage's are named as the model's first ``num_layers``; a last stage that
    is not the first holds its own head even where the model ties it to the embedding (Megatron-LM's
    ``share_embeddings_and_output_weights`` over stages keeps a copy there)."""
    layers = model.num_layers if num_layers is None else num_layers
    out = []
    for name, shape in parameter_shapes(model):
        module, _, kind = name.rpartition(".")
        if name.startswith("layers."):
            index = int(name.split(".")[1])
            if index >= layers:
                continue
            module = module.split(".", 2)[2]
        elif name.startswith(("tok_embeddings", "pos_embeddings")) and not first:
            continue
        elif name.startswith(("norm", "output")) and not last:
            continue
        if module in COLUMN_WISE:
            shape = (_chunk(shape[0], tp, tp_rank), *shape[1:])
        elif module in ROW_WISE and kind == "weight":
            shape = (shape[0], _chunk(shape[1], tp, tp_rank))
        out.append((name, shape))
    if model.tied_embeddings and last and not first:
        out.append(("output.weight", (_chunk(model.vocab_size, tp, tp_rank), model.hidden_size)))
    return out

"""A whole decoder-only transformer on a 2-D (SUMMA) or 2.5-D (Tesseract) tensor-parallel grid.

The layers are :mod:`plait.run.tp2d`'s, stacked, with rotary embedding (:func:`plait.run.model.apply_rope`).
Around them the embedding, the final norm and the output head are split by width over the row group only, a 1-D
split (Megatron's row-parallel linear, Shoeybi et al. 2019, Sec. 3) kept on every row and depth slice:

- rank ``(z, i, j)`` holds the embedding's columns ``j`` (``[V, D/q]``): its lookup of the rank's sequences is
  the first layer's input block ``X_ij`` with no communication;
- the final RMSNorm is the layers' (its statistics summed along the row);
- the head's rows ``j`` (``[D/q, V]``) give partial logits that one all-reduce along the row completes; every
  rank of a row then holds its sequences' whole logits and computes their loss. Its backward is the identity
  (Megatron's ``_ReduceFromModelParallelRegion``): the row's ranks compute the same loss, each takes its part.

Those three are replicated over the ``q`` rows and ``d`` slices, so their gradients are summed over the column
and depth groups once per step. The cost model charges 1-D tensor parallelism's embedding and head for them
(:func:`plait.cost.tp2d.base_setup`); their bytes here are counted apart (``edges``) from the layers'.

Weights come from the one-process model (:func:`plait.run.model.build_model`, same seed): each rank builds it
and keeps its blocks, so a grid run starts where ``tp = 1`` does (a tiny-model runtime; a large model would
build its blocks directly). Legend: ``T`` tokens of the rank's sequences, ``D`` model width, ``V`` vocabulary,
``B`` sequences, ``S`` sequence length.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F

from plait.errors import ConfigError
from plait.run.model import build_model, rope_tables
from plait.run.tp2d import Grid, LayerShape, grid_blocks, layer_forward, reduce_weight_grads, rms_norm
from plait.workload.model import ModelSpec

NORM_EPS = 1e-5  # nn.RMSNorm(eps=1e-5) of plait.run.model._norm
LAYER_BLOCKS = ("norm1", "norm2", "wqkv", "wo", "wup", "wdown")
EDGES = ("embedding", "norm", "output")


def check_grid_model(spec: ModelSpec) -> None:
    """Refuse what the grid's layers do not build (they are a Llama-style dense layer)."""
    refusals = [(spec.moe is not None, "a mixture-of-experts model"), (spec.mlp != "gated", f"mlp={spec.mlp!r}"),
                (spec.norm != "rmsnorm", f"norm={spec.norm!r}"), (spec.position != "rope", f"position={spec.position!r}"),
                (spec.attention_bias or spec.mlp_bias, "linear biases")]
    for refused, what in refusals:
        if refused:
            raise ConfigError(f"{what} ({spec.name}): plait runs a tensor-parallel grid for gated-MLP, RMSNorm, "
                              "rotary, bias-free dense transformers (plait/run/tp2d_model.py)")


@dataclass
class GridModel:
    """This rank's blocks of the whole model, and what it needs to run them."""

    grid: Grid
    """The layers' grid (its ``counted``: the layers' bytes)."""
    edges: Grid
    """The same groups, counting the embedding's, final norm's, head's and gradient norm's bytes."""
    shape: LayerShape
    num_layers: int
    seq_len: int
    params: dict[str, torch.Tensor]
    """``layers.<n>.<block>`` (:data:`LAYER_BLOCKS`) and :data:`EDGES`: leaf tensors, this rank's blocks."""
    rope: tuple[torch.Tensor, torch.Tensor]

    def layer(self, index: int) -> dict[str, torch.Tensor]:
        return {name: self.params[f"layers.{index}.{name}"] for name in LAYER_BLOCKS}

    def counts_in_norm(self, name: str) -> bool:
        """Whether this rank adds block ``name`` to the gradient norm: one copy of each. A matrix block is held
        by the ``d`` depth slices (slice 0 counts it); a width slice by every row of every slice (row 0 of
        slice 0)."""
        whole_column = name in EDGES or name.rsplit(".", 1)[-1] in ("norm1", "norm2")
        return self.grid.z == 0 and (self.grid.i == 0 or not whole_column)


def build_grid_model(spec: ModelSpec, seq_len: int, seed: int, grid: Grid, device: str) -> GridModel:
    """This rank's blocks of the one-process model built with ``seed``."""
    check_grid_model(spec)
    full = build_model(spec, seq_len, seed)
    shape = LayerShape(hidden=spec.hidden_size, heads=spec.num_heads, kv_heads=spec.num_kv_heads,
                       head_dim=spec.head_dim, ffn=spec.ffn_hidden_size)
    params: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for index, block in full.layers.items():
            a, f = block.attention, block.feed_forward
            whole = {"norm1": block.attention_norm.weight, "norm2": block.ffn_norm.weight,
                     "wqkv": torch.cat([a.wq.weight.T, a.wk.weight.T, a.wv.weight.T], dim=1), "wo": a.wo.weight.T,
                     "wup": torch.cat([f.w1.weight.T, f.w3.weight.T], dim=1), "wdown": f.w2.weight.T}
            params.update({f"layers.{index}.{k}": v for k, v in grid_blocks(grid, shape, whole).items()})
        q, j = grid.q, grid.j
        assert full.tok_embeddings is not None and full.norm is not None and full.output is not None
        params["embedding"] = full.tok_embeddings.weight.chunk(q, dim=1)[j]
        params["norm"] = full.norm.weight.chunk(q)[j]
        params["output"] = full.output.weight.T.chunk(q, dim=0)[j]
    params = {k: v.detach().clone().contiguous().to(device).requires_grad_(True) for k, v in params.items()}
    cos, sin = rope_tables(spec.head_dim, seq_len)
    return GridModel(grid=grid, edges=replace(grid, counted={}), shape=shape, num_layers=spec.num_layers,
                     seq_len=seq_len, params=params, rope=(cos.to(device), sin.to(device)))


class _RowReduce(torch.autograd.Function):
    """Sum over the row forward; identity backward (every rank of the row uses the whole sum the same way)."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, grid: Grid) -> torch.Tensor:  # type: ignore[override]
        out = t.contiguous().clone()
        grid.all_reduce(out, "row")
        return out

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        return g, None


def grid_logits(model: GridModel, tokens_BS: torch.Tensor) -> torch.Tensor:
    """Logits ``[B, S, V]`` of this rank's sequences ``tokens_BS`` (the same on every rank of its row)."""
    seqs, width = tokens_BS.shape[0], model.shape.hidden // model.grid.q
    x_TD = F.embedding(tokens_BS, model.params["embedding"]).reshape(-1, width)
    rope = (model.rope[0][: tokens_BS.shape[1]], model.rope[1][: tokens_BS.shape[1]])
    for index in range(model.num_layers):
        x_TD = layer_forward(model.grid, model.shape, seqs, x_TD, model.layer(index), rope, NORM_EPS)
    h_TD = rms_norm(model.edges, x_TD, model.params["norm"], model.shape.hidden, NORM_EPS)
    logits_TV = _RowReduce.apply(h_TD @ model.params["output"], model.edges)
    return logits_TV.reshape(seqs, tokens_BS.shape[1], -1)  # type: ignore[no-any-return]


def finish_layer_grads(model: GridModel) -> None:
    """After one micro-batch's backward: sum the layers' norm slices over the column and, on 2.5-D, every block
    over the depth (:func:`plait.run.tp2d.reduce_weight_grads`, as the cost model charges per micro-batch)."""
    for index in range(model.num_layers):
        reduce_weight_grads(model.grid, model.layer(index))


def finish_edge_grads(model: GridModel) -> None:
    """Once per step: the embedding's, final norm's and head's gradients summed over the rows (column group)
    and the slices (depth group), where copies of them were used."""
    for name in EDGES:
        grad = model.params[name].grad
        assert grad is not None
        model.edges.all_reduce(grad, "col")
        if model.grid.d > 1:
            model.edges.all_reduce(grad, "depth")


def grid_grad_norm(model: GridModel, group: Any = None) -> torch.Tensor:
    """The whole model's gradient 2-norm: each block's squares counted once (:meth:`GridModel.counts_in_norm`),
    summed over the grid's ranks (``group``: the whole tensor-parallel group; ``None`` the world)."""
    squared = torch.zeros((), dtype=torch.float32, device=next(iter(model.params.values())).device)
    for name, p in model.params.items():
        if p.grad is not None and model.counts_in_norm(name):
            squared = squared + p.grad.float().pow(2).sum()
    model.edges.count("grid", "all_reduce", squared)
    torch.distributed.all_reduce(squared, group=group)
    return squared.sqrt()

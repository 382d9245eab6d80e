"""The per-rank, per-layer quantities of one inner combination or of every plan row (:mod:`plait.cost.inner`
computes them): one layer kind's times, bytes and parameter counts, and everything else a stage reads."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, TypeAlias

from plait.frozen import direct_init

if TYPE_CHECKING:
    import numpy as np

Value: TypeAlias = "float | np.ndarray"
"""A float for one combination, an array with one entry per plan row."""


@direct_init
@dataclass(frozen=True)
class LayerKind:
    """One layer kind (dense or MoE) on one rank for one micro-batch; a float, or an array with one entry per plan
    row. A kind the model does not have is all zeros (one tensor, so per-tensor divisions stay finite)."""

    fwd_s: Value
    """Forward compute (GEMMs, attention, memory-bound ops, host dispatch)."""
    bwd_s: Value
    """Backward compute."""
    recompute_s: Value
    """What recomputation adds to the backward of this layer (full: a forward; selective: the attention core)."""
    tp_fwd_s: Value
    """Exposed TP/SP collectives of the forward (and wrapper host time)."""
    tp_bwd_s: Value
    """Exposed TP/SP collectives of the backward."""
    cp_fwd_s: Value
    """Exposed context-parallel exchange of the forward."""
    cp_bwd_s: Value
    """Exposed context-parallel exchange of the backward."""
    ep_fwd_s: Value
    """Expert-parallel dispatch and combine of the forward."""
    ep_bwd_s: Value
    """Expert-parallel dispatch and combine of the backward."""
    host_fwd_s: Value
    """Host time to issue the forward's kernels that the pass joins with its device work (:func:`plait.cost.host.
    layer_host_s`; 0 for an MoE layer that syncs in its forward, joined inside ``fwd_s``)."""
    host_bwd_s: Value
    """Host time to issue the backward's kernels (recomputation included)."""
    activation_bytes: Value
    """Stored activations without recomputation."""
    selective_activation_bytes: Value
    """Stored activations with the attention core recomputed."""
    num_params: Value
    """Parameters replicated over the expert-parallel group (attention, norms, router, shared experts, dense MLP)."""
    num_expert_params: Value
    """Routed-expert parameters on this rank."""
    num_tensors: Value
    """Parameter tensors of the layer as frameworks store them."""
    num_persistent_tensors: Value = 0.0
    """Those with fewer elements than the engine's ``shard_persist_below``: never partitioned, never gathered."""
    num_persistent_params: Value = 0.0
    """Their elements."""


@direct_init
@dataclass(frozen=True)
class Inner:
    """Every inner quantity of one combination (floats) or of every plan row (arrays)."""

    dense: LayerKind
    """A layer with a dense MLP."""
    moe: LayerKind
    """A mixture-of-experts layer."""
    layer_input_bytes: Value
    """The checkpointed layer input kept under full recomputation."""
    first_stage_bytes: Value
    """Embedding output stored on the first stage."""
    last_stage_bytes: Value
    """Final-norm input, logits and loss buffers on the last stage."""
    embedding_fwd_s: Value
    """Embedding lookup writing the hidden states."""
    embedding_bwd_s: Value
    """Scattering their gradient back."""
    head_fwd_s: Value
    """Output projection, loss and final norm, forward."""
    head_bwd_s: Value
    """The same, backward."""
    embedding_tp_fwd_s: Value
    """TP collectives of the vocab-parallel embedding, forward."""
    embedding_tp_bwd_s: Value
    """The same, backward."""
    head_tp_fwd_s: Value
    """TP collectives of the output projection and loss, forward."""
    head_tp_bwd_s: Value
    """The same, backward."""
    p2p_bytes: Value
    """Bytes of one activation (or gradient) transfer between pipeline stages."""
    num_vocab_params: Value
    """Embedding (or output projection) parameters on one TP rank."""
    grad_bytes: Value
    """Bytes per gradient element in the buffer and its reduction."""
    weight_cache_bytes: Value
    """Bytes per transformer-layer parameter of cached fp8 weight copies (:attr:`EngineFacts.fp8_weight_cache_bytes`,
    0 unless the GEMMs run in fp8)."""

    @property
    def kinds(self) -> tuple[LayerKind, LayerKind]:
        """(dense, MoE)."""
        return self.dense, self.moe


ABSENT = LayerKind(**{f.name: (1.0 if f.name == "num_tensors" else 0.0) for f in fields(LayerKind)})
"""The kind a model does not have (a frozen value, shared)."""

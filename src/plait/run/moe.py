"""Mixture-of-experts feed-forward blocks and expert parallelism on torch.distributed.

Legend of shape suffixes: B batch, S sequence, D model width, T tokens of this rank (B*S),
E routed experts (global), K experts per token (top-k), N = T*K token-expert assignments,
P ranks of the expert-parallel group, L experts per rank (E/P), R assignments this rank's
experts receive from the whole EP group.

References:
- Shazeer et al. 2017, "Outrageously Large Neural Networks": a linear router, softmax, top-k
  token-choice routing, output = sum over chosen experts of gate x expert(x).
- GShard (Lepikhin et al. 2020) Sec. 2.2: the MoE layer with experts sharded over devices,
  tokens sent to their experts' devices by an all-to-all (dispatch) and back by another (combine).
  Unlike GShard there is no expert capacity: routing is dropless (every token reaches every
  expert it chose, as in MegaBlocks, Gale et al. 2022), so split sizes are uneven and are
  exchanged first.
- Mixtral (Jiang et al. 2024): SwiGLU experts, top-2 of 8. Gates here are the softmax over all
  E experts restricted to the chosen K, not renormalised (DeepSeek-V2 arXiv 2405.04434 Sec.
  2.2.1; torchtitan's default); Mixtral renormalises over the K.
- DeepSeek-V3 (arXiv 2412.19437 Sec. 2.1.2): shared experts every token passes through, summed
  with the routed output. The ``num_shared_experts`` shared experts run as one MLP of width
  ``num_shared_experts * shared_expert_ffn_hidden_size`` (DeepSeek's reference code does the
  same); that is exactly their sum (with ``mlp_bias`` the down-projection bias is one vector).
No auxiliary load-balancing loss (Shazeer et al. 2017 Eq. 6-7, GShard's l_aux) is added: the
runtime trains the plain language-model loss, which is what the parity tests compare.

Expert parallelism (``ep > 1``) is carved from the data-parallel ranks (:attr:`Mesh.expert`):
each of the P = ep ranks of an EP group holds E/ep experts; an expert's replicas live on the
dp/ep ranks with the same EP coordinate (the expert-data-parallel group), over which its
gradients are reduced.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F
from torch import nn

from plait.plan.plan import Plan
from plait.run.chunked import Sent
from plait.run.chunked_moe import expert_parallel
from plait.run.mesh import Mesh
from plait.run.model import FeedForward
from plait.workload.model import ModelSpec


def is_moe_layer(spec: ModelSpec, layer: int) -> bool:
    """Whether ``layer`` has an MoE block (:meth:`plait.workload.model.ModelSpec.is_moe_layer`, as
    :func:`plait.cost.params.stage_layer_counts` counts them)."""
    return spec.is_moe_layer(layer)


class Experts(nn.ModuleDict):
    """The routed experts this rank holds, keyed by global expert index, so that parameter names
    (and the name-keyed init of :func:`plait.run.model.init_weights`) match the unsharded model.
    A module of its own so that FSDP2 gathers all of a layer's local experts at once.

    The experts run one after another (a loop of GEMMs, as Hugging Face's Mixtral does): torchtitan's
    grouped GEMM over ``[L, D, F]`` weights (``torch._grouped_mm``) is faster but CUDA-only, and this
    one code path serves both the gloo parity tests and a GPU."""

    def __init__(self, spec: ModelSpec, indices: range) -> None:
        assert spec.moe is not None
        expert_spec = replace(spec, ffn_hidden_size=spec.moe.expert_ffn_hidden_size)
        super().__init__({str(e): FeedForward(expert_spec) for e in indices})

    def forward(self, x_RD: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """Rows sorted by expert, ``counts[i]`` of them for the i-th local expert. Every expert runs,
        on an empty chunk if need be, so that its gradient exists (zeros) on every step and rank."""
        chunks = x_RD.split(counts)
        return torch.cat([expert(chunk) for expert, chunk in zip(self.values(), chunks, strict=True)])


class MoeFeedForward(nn.Module):
    """Router, routed experts (all of them, or this rank's under expert parallelism), shared experts."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        assert spec.moe is not None
        moe = spec.moe
        self.num_experts, self.top_k = moe.num_experts, moe.top_k
        self.router = nn.Linear(spec.hidden_size, moe.num_experts, bias=False)
        self.experts = Experts(spec, range(moe.num_experts))
        self.shared_experts: nn.Module | None = None
        if moe.num_shared_experts:
            width = moe.num_shared_experts * moe.shared_expert_ffn_hidden_size
            self.shared_experts = FeedForward(replace(spec, ffn_hidden_size=width))
        self.ep_group: dist.ProcessGroup | None = None
        self.ep = 1
        self.chunked: tuple[int, Any] | None = None
        """``overlap_chunks`` and the rank's ledger (:class:`plait.run.chunked.Sent`): the all-to-alls run chunked
        (:mod:`plait.run.chunked_moe`); ``None``: whole."""

    def keep_experts(self, ep_rank: int, ep: int, group: dist.ProcessGroup) -> None:
        """Keep experts ``ep_rank*E/ep .. (ep_rank+1)*E/ep - 1`` and route through ``group``."""
        per_rank = self.num_experts // ep
        for name in list(self.experts):
            if int(name) // per_rank != ep_rank:
                del self.experts[name]
        self.ep_group, self.ep = group, ep

    def forward(self, x_BSD: torch.Tensor) -> torch.Tensor:
        b, s, d = x_BSD.shape
        x_TD = x_BSD.reshape(b * s, d)
        probs_TE = F.softmax(self.router(x_TD).float(), dim=-1)
        gate_TK, expert_TK = probs_TE.topk(self.top_k, dim=-1)
        order_N = expert_TK.flatten().argsort(stable=True)  # assignments grouped by expert
        token_N = order_N // self.top_k
        counts_E = torch.bincount(expert_TK.flatten(), minlength=self.num_experts)
        routed_ND = x_TD[token_N]
        if self.ep_group is None:
            y_ND = self.experts(routed_ND, counts_E.tolist())
        elif self.chunked is not None:
            y_ND = expert_parallel(self, routed_ND, counts_E, *self.chunked)
        else:
            y_ND = self._expert_parallel(routed_ND, counts_E)
        weighted_ND = (y_ND.float() * gate_TK.flatten()[order_N, None]).to(y_ND.dtype)
        out_TD = y_ND.new_zeros((b * s, d)).index_add(0, token_N, weighted_ND)
        if self.shared_experts is not None:
            out_TD = out_TD + self.shared_experts(x_TD)
        return out_TD.view(b, s, d)

    def _expert_parallel(self, routed_ND: torch.Tensor, counts_E: torch.Tensor) -> torch.Tensor:
        """Dispatch rows to the ranks owning their experts, run the local experts, combine back.

        ``funcol.all_to_all_single_autograd`` is the autograd-aware all-to-all that torch 2.13 names as
        the replacement of the deprecated ``torch.distributed.nn.functional.all_to_all_single``; its
        backward is the reverse all-to-all with the split sizes swapped."""
        group, ep = self.ep_group, self.ep
        per_rank = self.num_experts // ep
        received_E = torch.empty_like(counts_E)
        dist.all_to_all_single(received_E, counts_E, group=group)  # counts only: no gradient
        received_PL = received_E.view(ep, per_rank)  # rows this rank gets from rank p for its expert l
        send_splits = counts_E.view(ep, per_rank).sum(1).tolist()
        receive_splits = received_PL.sum(1).tolist()
        received_RD = funcol.all_to_all_single_autograd(routed_ND, receive_splits, send_splits, group)
        local_R = torch.arange(per_rank, device=counts_E.device).repeat(ep).repeat_interleave(received_PL.flatten())
        by_expert_R = local_R.argsort(stable=True)  # source-rank-major -> expert-major
        y_RD = self.experts(received_RD[by_expert_R], received_PL.sum(0).tolist())
        y_RD = y_RD[by_expert_R.argsort()]  # back to source-rank-major
        return funcol.all_to_all_single_autograd(y_RD, send_splits, receive_splits, group)


def apply_ep(model: nn.Module, mesh: Mesh) -> None:
    """Keep this rank's experts in every MoE block and wire the EP group (a no-op for ep == 1).

    Each stage is materialised whole before this (:func:`plait.run.model.build_model`), so other
    ranks' experts are briefly allocated on the host: fine at the sizes the runtime trains."""
    if mesh.plan.ep == 1:
        return
    ep_rank, group = mesh.expert.get_local_rank("ep"), mesh.expert["ep"].get_group()
    sent = Sent()  # overlap_chunks > 1: the ledger of the chunked all-to-alls
    for module in model.modules():
        if isinstance(module, MoeFeedForward):
            module.keep_experts(ep_rank, mesh.plan.ep, group)
            if mesh.plan.overlap_chunks > 1:
                module.chunked = (mesh.plan.overlap_chunks, sent)


def expert_parameters(modules: list[nn.Module], plan: Plan) -> list[torch.Tensor]:
    """Parameters that differ across the EP group (none when ep == 1: experts are then replicated
    like every other parameter and DDP/FSDP reduce them)."""
    if plan.ep == 1:
        return []
    return [p for m in modules for sub in m.modules() if isinstance(sub, Experts) for p in sub.parameters()]


def ignore_experts_in_ddp(model: nn.Module, plan: Plan) -> None:
    """Tell DDP (before wrapping) to neither broadcast nor all-reduce the experts: they are not
    replicated over its group; :func:`reduce_expert_gradients` reduces them instead."""
    if plan.ep == 1:
        return
    names = [f"{prefix}.{name}" for prefix, sub in model.named_modules() if isinstance(sub, Experts)
             for name, _ in sub.named_parameters()]
    nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, names)


def reduce_expert_gradients(params: list[torch.Tensor], mesh: Mesh) -> None:
    """Under DDP: sum expert gradients over the expert-data-parallel ranks (same EP coordinate)
    and divide by dp, in one flat buffer.

    Each owner's gradient already sums the losses of its whole EP group (the combine all-to-all's
    backward brings them back), so the sum over the expert-dp ranks covers all dp ranks and the
    division by dp gives the same average over the global batch as DDP's for dense parameters.
    Under FSDP2 (zero2/zero3) the experts' own ``fully_shard`` does this (:func:`shard_experts`)."""
    plan = mesh.plan
    if not params or plan.sharding in ("zero2", "zero3"):
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params])  # type: ignore[union-attr]
    if plan.dp // plan.ep > 1:
        dist.all_reduce(flat, group=mesh.expert["edp"].get_group())
    flat /= plan.dp
    offset = 0
    for p in params:
        grad = p.grad
        assert grad is not None
        grad.copy_(flat[offset:offset + grad.numel()].view_as(grad))
        offset += grad.numel()


def shard_experts(model: nn.Module, mesh: Mesh, fsdp_kwargs: dict[str, object]) -> None:
    """FSDP2 for the experts of every MoE block over the expert-data-parallel mesh (before the
    blocks are sharded over dp, so that theirs excludes the experts), as torchtitan does.

    FSDP2 would average over the dp/ep ranks of that mesh; the divide factor is set to dp instead,
    for the reason given in :func:`reduce_expert_gradients`. Over more than one rank the reduction is
    forced to a plain sum (then a division) because gloo has no PREMUL_SUM; on a one-rank mesh FSDP2
    skips the collective and divides by the factor itself (forcing the sum there divides twice in
    torch 2.13, ``_fsdp_collectives.foreach_reduce``)."""
    if mesh.plan.ep == 1:
        return
    from torch.distributed.fsdp import fully_shard

    edp_mesh = mesh.expert["edp"]
    kwargs = {**fsdp_kwargs, "mesh": edp_mesh}
    for module in model.modules():
        if isinstance(module, Experts):
            sharded = fully_shard(module, **kwargs)  # type: ignore[arg-type]
            sharded.set_gradient_divide_factor(float(mesh.plan.dp))
            sharded.set_force_sum_reduction_for_comms(edp_mesh.size() > 1)

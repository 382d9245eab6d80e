"""Memory: Korthikanti et al. 2022 Table 2 (activations) and ZeRO Fig. 1 (model states)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from plait.cost import activations as act
from plait.cost.setup import Setup
from plait.engine.catalog import get_engine
from plait.engine.facts import EngineFacts
from plait.hardware.catalog import get_cluster
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.workload.catalog import get_model

GPT = replace(get_model("megatron-gpt-22b"), dropout=True)  # Korthikanti's GPT: MHA, plain MLP 4h, dropout
CLUSTER = get_cluster("dgx-a100-ib")


def _setup(plan: Plan) -> Setup:
    return Setup(model=GPT, cluster=CLUSTER, plan=plan.with_seq_len(GPT.seq_len), framework=EngineFacts(attention_kernel="unfused"))


# Korthikanti et al. 2022, Table 2: activation bytes per layer, s b h = sequence, micro-batch, hidden.
TABLE_2 = {
    "no parallelism": (Plan(micro_batch=2), "none", lambda s, b, h, a, t: s * b * h * (34 + 5 * a * s / h)),
    "tensor parallel": (Plan(tp=8, micro_batch=2), "none",
                        lambda s, b, h, a, t: s * b * h * (10 + 24 / t + 5 * a * s / (h * t))),
    "tensor + sequence parallel": (Plan(tp=8, sp=True, micro_batch=2), "none",
                                   lambda s, b, h, a, t: s * b * h * (34 / t + 5 * a * s / (h * t))),
    "tensor parallel + selective": (Plan(tp=8, micro_batch=2), "selective",
                                    lambda s, b, h, a, t: s * b * h * (10 + 24 / t)),
    "tensor + sequence parallel + selective": (Plan(tp=8, sp=True, micro_batch=2), "selective",
                                               lambda s, b, h, a, t: s * b * h * 34 / t),
    "full recompute": (Plan(tp=8, micro_batch=2), "full", lambda s, b, h, a, t: 2 * s * b * h),
}


@pytest.mark.parametrize("case", TABLE_2)
def test_korthikanti_table2(case: str) -> None:
    """Exact: the generalised terms reduce to Table 2 for MHA, 4h MLP, dropout, unfused attention."""
    plan, mode, formula = TABLE_2[case]
    setup = _setup(plan)
    if mode == "none":
        got = act.layer_bytes(setup, False)
    elif mode == "selective":
        got = act.layer_bytes_selective(setup, False)
    else:
        got = act.layer_input_bytes(setup)
    s, b, h, a, t = GPT.seq_len, plan.micro_batch, GPT.hidden_size, GPT.num_heads, plan.tp
    assert got == pytest.approx(formula(s, b, h, a, t), rel=1e-12)


def test_flash_drops_score_matrix_and_keeps_lse() -> None:
    setup = Setup(model=GPT, cluster=CLUSTER, plan=Plan(tp=8, sp=True).with_seq_len(GPT.seq_len),
                  framework=EngineFacts())
    s, h, a, t = GPT.seq_len, GPT.hidden_size, GPT.num_heads, 8
    assert act.layer_bytes(setup, False) == pytest.approx(s * h * 34 / t + 4 * s * a / t)


# ZeRO (Rajbhandari et al. 2020), Fig. 1: 7.5B parameters, 64-way data parallel, K = 12, fp16 grads.
ZERO_FIG1_GB = {"none": 120.0, "zero1": 31.4, "zero2": 16.6, "zero3": 1.9}


@pytest.mark.parametrize("sharding", ZERO_FIG1_GB)
def test_zero_fig1_model_states(sharding: str) -> None:
    """Published figures are rounded to 3 significant digits: 2% tolerance."""
    model = get_model("megatron-gpt-7.5b")
    plan = Plan(dp_shard=64 if sharding != "none" else 1, dp_replicate=1 if sharding != "none" else 64,
                sharding=sharding, global_batch=64, grad_reduce_dtype="bf16")  # type: ignore[arg-type]
    mem = estimate(model, CLUSTER, plan, engine=get_engine()).memory
    per_param = (mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes) / model.total_params()
    assert per_param * 7.5e9 / 1e9 == pytest.approx(ZERO_FIG1_GB[sharding], rel=0.02)


def test_offload_moves_optimizer_off_gpu() -> None:
    model = get_model("llama3-8b")
    base = Plan(dp_shard=8, sharding="zero3", global_batch=8)
    on = estimate(model, CLUSTER, base, engine=get_engine()).memory
    off = estimate(model, CLUSTER, replace(base, offload_optimizer=True), engine=get_engine()).memory
    assert off.optimizer_bytes == 0 and on.optimizer_bytes > 0
    assert off.activations_bytes == on.activations_bytes


@pytest.mark.parametrize(("compiled", "saves_attention", "bytes_per_token"), [
    (True, True, 2 * 4096 + 2 * 4096 + 2 * 1024 + (2 * 4096 + 4 * 32) + 2 * 14336),  # x, wq, wv, sdpa out + lse, w1
    (True, False, 2 * 4096 + 2 * 4096 + 2 * 1024 + 2 * 14336),  # cuDNN attention outside the save list
    (False, True, 2 * 4096 + 2 * 4096 + 2 * 1024 + (2 * 4096 + 4 * 32) + 2 * 14336 + 2 * 4096),  # eager keeps w2's
])
def test_torchtitan_per_op_sac_keeps_every_other_matmul(compiled: bool, saves_attention: bool,
                                                     bytes_per_token: int) -> None:
    """torchtitan's SelectiveAC on a Llama-3-8B block (wq wk wv wo w1 w3 w2 run in that order; the 1st, 3rd, 5th
    and 7th matmul outputs and the SDPA outputs are saved, torchtitan 0.3.0 distributed/activation_checkpoint.py);
    compiled, w2's output, which only the residual add reads, is not kept (docs/research/torchtitan_memory_versions.md)."""
    model = get_model("llama3-8b")
    framework = EngineFacts(selective_policy="every_other_mm", sac_saves_attention=saves_attention,
                          fused_input_projections=False, pointwise="fused" if compiled else "eager")
    setup = Setup(model=model, cluster=get_cluster("dgx-h100-ib"), plan=Plan(recompute="selective").with_seq_len(8192),
                  framework=framework)
    assert act.layer_bytes_selective(setup, False) == 8192 * bytes_per_token


def test_torchtitan_per_op_sac_under_sequence_parallelism_keeps_the_reduce_scatter_output() -> None:
    """With TP=2 and SP, a compiled block keeps per rank: its sequence shard of the input, wq's and wv's local
    outputs (half the heads), the SDPA output and log-sum-exp of those heads, w1's local output and the output
    projection's reduce-scatter output (reduce_scatter_tensor is in torchtitan's save list; the residual sum after
    attention feeds the MLP norm, so the backward reads it)."""
    model = get_model("llama3-8b")
    framework = EngineFacts(selective_policy="every_other_mm", fused_input_projections=False, pointwise="fused")
    setup = Setup(model=model, cluster=get_cluster("dgx-h100-ib"),
                  plan=Plan(tp=2, sp=True, recompute="selective").with_seq_len(8192), framework=framework)
    per_token = (2 * 4096 / 2 + 2 * 16 * 128 + 2 * 4 * 128 + 16 * (2 * 128 + 4) + 2 * 14336 / 2
                 + 2 * 4096 / 2)
    assert act.layer_bytes_selective(setup, False) == 8192 * per_token

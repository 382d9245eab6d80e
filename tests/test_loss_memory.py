"""What the loss and fp8 weight copies add to memory per GPU (measured memory): the loss's peak bytes
per logit as each engine computes it, checked against a measurement of plait's own loss, and Transformer
Engine's cached fp8 weights."""

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

MODEL = get_model("llama3-8b")
CLUSTER = get_cluster("dgx-h100-ib")


def test_plaits_own_loss_peaks_at_the_bytes_its_engine_charges() -> None:
    """``plait run``'s loss (an eager cross-entropy of the upcast logits) measured on this CPU: the process's peak
    resident memory over the step, per logit, is the 12 bytes the ``plait`` engine charges (the saved fp32
    log-probabilities, the NLL's fp32 gradient and the log-softmax's). Tensors this large are mmap-backed, so
    resident memory follows what is live: at 512 tokens the bf16 logits are 32 MiB and each fp32 tensor 64 MiB, at
    or above glibc's largest mmap threshold (32 MiB on 64-bit, mallopt(3) M_MMAP_THRESHOLD). The probe measured
    12.00 and 11.99 bytes per logit at 512 tokens, 12.00 and 12.00 at 1024, in half the CPU time (loaded machine)."""
    from tests.conftest import load_benchmark

    measured = load_benchmark("loss_memory").measure("eager", 512, 32768)  # benchmarks/loss_memory.py's probe
    assert measured == pytest.approx(get_engine("plait").framework.loss_bytes_per_logit, abs=0.5)


def _last_stage(framework: EngineFacts, plan: Plan) -> float:
    return act.last_stage_extra_bytes(Setup(model=MODEL, cluster=CLUSTER, plan=plan.with_seq_len(8192),
                                            framework=framework))


def test_the_loss_holds_the_engines_bytes_per_logit_on_its_vocabulary_shard() -> None:
    plan = Plan(tp=4, sp=True, micro_batch=2, global_batch=8)
    logits = 2 * 8192 * MODEL.vocab_size
    eager, compiled = (get_engine(e).framework for e in ("torchtitan", "torchtitan[compile=true]"))
    assert (eager.loss_bytes_per_logit, compiled.loss_bytes_per_logit) == (12.0, 4.0)
    assert _last_stage(eager, plan) - _last_stage(compiled, plan) == pytest.approx(8 * logits / 4)
    gathered = replace(eager, tp_loss="gathered")  # the full logits on every TP rank
    assert _last_stage(gathered, plan) - _last_stage(eager, plan) == pytest.approx(12 * logits * (1 - 1 / 4))


def test_transformer_engine_keeps_fp8_weight_copies_and_torchao_does_not() -> None:
    """An fp8 plan under Megatron-Core holds 2 more bytes per transformer-layer parameter than its bf16 twin's
    weights (TE's cached rowwise and columnwise fp8 workspaces); torchtitan's torchao float8 casts anew."""
    plan = Plan(tp=8, sp=True, micro_batch=1, global_batch=8, precision="fp8")
    h, kv, ffn = 4096, 8 * 128, 14336  # Llama 3 8B: q and o h x h, k and v h x kv, three h x ffn, two norms
    layer_params = 32 * ((h * (2 * h + 2 * kv) + 3 * h * ffn) / 8 + 2 * h)  # TP splits the GEMMs, not the norms
    megatron = get_engine("megatron-core")
    fp8 = estimate(MODEL, CLUSTER, plan, engine=megatron).memory
    bf16 = estimate(MODEL, CLUSTER, replace(plan, precision="bf16"), engine=megatron).memory
    assert fp8.weights_bytes - bf16.weights_bytes == pytest.approx(2 * layer_params)
    titan = get_engine("torchtitan")
    assert (estimate(MODEL, CLUSTER, plan, engine=titan).memory.weights_bytes
            == estimate(MODEL, CLUSTER, replace(plan, precision="bf16"), engine=titan).memory.weights_bytes)


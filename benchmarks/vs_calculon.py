"""plait against Calculon (Isaev et al., SC'23, github.com/calculon-ai/calculon): the same plans, one process.

Run: python benchmarks/vs_calculon.py --calculon /tmp/calculon      (or set PLAIT_CALCULON_DIR)
Get Calculon (not on PyPI; never vendored into plait): ``git clone https://github.com/calculon-ai/calculon
/tmp/calculon`` and ``pip install numpy pandas psutil`` (its package ``__init__`` imports all three). Without
a checkout the script prints one line saying so and exits 0.

For each plan of :data:`CASES` it times ``--repeats`` single-plan evaluations of each tool, in alternating
blocks of ``--block`` (plait x block, Calculon x block, plait x block, ...) so that machine drift hits both, and
prints evaluations per second of CPU time (one over the median evaluation's ``time.thread_time``: what the
evaluation itself costs, less exposed to a shared machine's other work), the ratio plait / Calculon of those and of
wall-clock rates, and both predicted step times; it ends with the worst CPU ratio and the machine's load average. A block is a user's sequence of evaluations of one tool (a sweep over
plans, a validation run): each tool is timed warm, as it runs such a sequence. ``--block 1`` interleaves single
calls, where each tool also pays the cache refill after the other ran — which weighs more on the faster one.
A ``*`` marks plans whose pipeline plait times by its event simulation (``estimate``'s small-pipeline rule).

One evaluation, as a user evaluating one plan pays it:
- plait: construct the :class:`~plait.plan.plan.Plan`, ``estimate(model, cluster, plan).step_time_s``
  (default engine ``megatron-core``, rules checked, pipeline by closed form or simulation as ``estimate`` picks).
- Calculon: ``Llm.Execution.from_json(...)``, ``Llm(app, log)``, ``compile(system, exe)``, ``run(system)``
  (which includes its memory-capacity and sanity checks), ``get_total_time()``.
Not counted, for either: reading the model and system files (plait's packaged catalogs, Calculon's
``models/*.json`` and ``systems/a100_80g.json``), parsed once before timing, and one warm-up evaluation each.

Knob mapping (:func:`calculon_execution`; a plan outside it raises ``ValueError``):

=====================  =============================================  =========================================
what                   plait ``Plan``                                 Calculon ``Execution``
=====================  =============================================  =========================================
GPUs, degrees          ``tp``, ``pp``, ``dp_shard`` (cp = ep = 1)     ``tensor_par``, ``pipeline_par``,
                                                                      ``data_par``, ``num_procs`` = product
network tiers          ranks laid out tp fastest: tp in the node      ``tensor_par_net=0`` (NVLink, size 8),
                       (NVLink), dp and pp across IB                  ``pipeline_par_net=data_par_net=1`` (IB)
batch                  ``global_batch``, ``micro_batch``              ``batch_size``, ``microbatch_size``
pipeline schedule      ``1f1b`` / ``interleaved`` with ``vpp``        ``pipeline_interleaving`` = 1 / ``vpp``
recompute              ``none`` / ``selective`` / ``full``            ``none`` / ``attn_only`` / ``full``
                                                                      (Korthikanti et al. 2022, Sec. 5)
sequence parallel      ``sp=True`` / ``False``                        ``tensor_par_comm_type`` ``rs_ag`` / ``ar``
SP all-gather in bwd   not a plan field                               ``seq_par_ag_redo`` = sp and not full
                                                                      (Megatron-LM re-gathers; Calculon's own
                                                                      validation/seqsel files set it)
distributed optimizer  ``sharding="zero1"`` over all of dp            ``optimizer_sharding=True``
grad reduce dtype      ``grad_reduce_dtype="bf16"``                   gradients in ``datatype`` (no choice)
DP overlap             ``overlap_grad_reduce=True``                   ``data_par_overlap=True``
TP overlap             ``tp_comm_overlap=False``                      ``tensor_par_overlap="none"``
precision              ``precision="bf16"``                           ``datatype="float16"``: a100_80g.json
                                                                      rates only float16; A100 bf16 and fp16
                                                                      share the 312 TFLOP/s peak and 2 bytes
fused bias+GeLU        engine default (``EngineFacts.pointwise``)       ``fused_activation = pointwise=="fused"``
attention              MHA (``num_kv_heads == num_heads``)            ``attention_type="multihead"``
offload, training      ``offload_*=False``                            ``*_offload=False``, ``training=True``
=====================  =============================================  =========================================

Differences the mapping cannot remove (of the tools, not the plans): plait times flash attention
(Megatron-Core's default kernel), Calculon batched GEMMs plus softmax; Calculon leaves out the embedding,
the output layer and the loss; ``gpt3-175b`` has GPT-2's 50,257-token vocabulary, Calculon's parameter count
uses 51,200 (it does not enter Calculon's time). Hardware: plait's ``dgx-a100-ib`` preset against Calculon's
``systems/a100_80g.json`` (both A100-80GB, 8 per node, NVLink 300 GB/s, 25 GB/s InfiniBand per GPU).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.plan.plan import Plan
from plait.predict.estimate import SIMULATED_PASSES, estimate, wants_simulation
from plait.workload.catalog import get_model

PLAIT_CLUSTER = "dgx-a100-ib"
CALCULON_SYSTEM = "a100_80g"
ENV_VAR = "PLAIT_CALCULON_DIR"
GET_IT = (f"Calculon checkout not found: git clone https://github.com/calculon-ai/calculon /tmp/calculon && "
          f"pip install numpy pandas psutil, then pass --calculon /tmp/calculon or set {ENV_VAR}; skipping")
GLOBAL_BATCH = 1536
"""Sequences per step: GPT-3's 3.2M-token batch at 2,048 tokens (Brown et al. 2020, Table 2.1) ~ 1536 x 2048."""
COMMON = {"sharding": "zero1", "global_batch": GLOBAL_BATCH, "grad_reduce_dtype": "bf16"}


@dataclass(frozen=True, kw_only=True)
class Case:
    """One plan both tools can express."""

    name: str
    """Short label for the table."""
    plait_model: str
    """plait catalog slug (``plait models``)."""
    calculon_model: str
    """Stem of the same model's file in Calculon's ``models/`` folder."""
    plan: Plan
    """The plan, in plait's terms; Calculon's execution is derived from it."""


CASES = [
    Case(name="175B tp8 pp8 dp48 full", plait_model="gpt3-175b", calculon_model="gpt3-175B",
         plan=Plan(tp=8, pp=8, dp_shard=48, recompute="full", **COMMON)),  # 3,072 GPUs
    Case(name="175B tp8 pp16x3 dp24 full", plait_model="gpt3-175b", calculon_model="gpt3-175B",
         plan=Plan(tp=8, pp=16, schedule="interleaved", vpp=3, dp_shard=24, recompute="full", **COMMON)),
    Case(name="175B tp8+sp pp8 dp6 sel", plait_model="gpt3-175b", calculon_model="gpt3-175B",
         plan=Plan(tp=8, sp=True, pp=8, dp_shard=6, recompute="selective", **COMMON)),  # 384 GPUs
    Case(name="22B tp8+sp dp48 sel mb4", plait_model="megatron-gpt-22b", calculon_model="megatron-22B",
         plan=Plan(tp=8, sp=True, dp_shard=48, recompute="selective", micro_batch=4, **COMMON)),
    Case(name="22B tp8 pp2 dp24 none", plait_model="megatron-gpt-22b", calculon_model="megatron-22B",
         plan=Plan(tp=8, pp=2, dp_shard=24, recompute="none", **COMMON)),
]

_RECOMPUTE = {"none": "none", "selective": "attn_only", "full": "full"}


def _check_expressible(plan: Plan) -> None:
    """Refuse plan features Calculon's ``Execution`` has no knob for."""
    problems = [
        (plan.cp != 1 or plan.ep != 1, "cp and ep must be 1"),
        (plan.dp_replicate != 1 and plan.sharding != "none", "a sharded plan must shard over all of dp"),
        (plan.sharding not in ("none", "zero1"), "sharding must be none or zero1"),
        (plan.precision != "bf16" or plan.grad_reduce_dtype != "bf16", "precision and grad_reduce_dtype must be bf16"),
        (plan.schedule not in ("1f1b", "interleaved"), "schedule must be 1f1b or interleaved"),
        (plan.recompute == "full" and plan.recompute_layers != -1, "full recompute must cover every layer"),
        (plan.optimizer != "adamw" or not plan.master_weights, "optimizer must be adamw with master weights"),
        (plan.offload_optimizer or plan.offload_params or plan.tp_comm_overlap, "no offload, no TP overlap"),
    ]
    for broken, rule in problems:
        if broken:
            raise ValueError(f"{plan.describe()}: Calculon cannot express it ({rule})")


def calculon_execution(plan: Plan, fused_activation: bool) -> dict[str, Any]:
    """Calculon's ``Execution`` JSON for ``plan`` (the knob mapping in the module docstring)."""
    _check_expressible(plan)
    return {
        "num_procs": plan.num_gpus, "tensor_par": plan.tp, "pipeline_par": plan.pp, "data_par": plan.dp,
        "tensor_par_net": 0, "pipeline_par_net": 1, "data_par_net": 1,
        "batch_size": plan.global_batch, "microbatch_size": plan.micro_batch, "datatype": "float16",
        "fused_activation": fused_activation, "attention_type": "multihead",
        "activation_recompute": _RECOMPUTE[plan.recompute], "pipeline_interleaving": plan.vpp,
        "optimizer_sharding": plan.sharding == "zero1", "tensor_par_comm_type": "rs_ag" if plan.sp else "ar",
        "tensor_par_overlap": "none", "seq_par_ag_redo": plan.sp and plan.recompute != "full",
        "data_par_overlap": plan.overlap_grad_reduce and plan.dp > 1, "weight_offload": False,
        "activations_offload": False, "optimizer_offload": False, "training": True,
    }


def plait_fused_activation() -> bool:
    """Whether plait's default engine fuses the pointwise ops (Calculon's ``fused_activation``)."""
    return get_engine().framework.pointwise == "fused"


def plait_evaluator(case: Case) -> Callable[[], float]:
    """One plait evaluation of ``case``: build the plan, estimate it, return the step time in seconds."""
    model, cluster, plan = get_model(case.plait_model), get_cluster(PLAIT_CLUSTER), case.plan
    return lambda: estimate(model, cluster, replace(plan),
                            engine=get_engine()).step_time_s  # replace() constructs a new Plan


class CalculonSide:
    """Calculon imported from a checkout, with its model and system files parsed once."""

    def __init__(self, root: Path) -> None:
        sys.path.insert(0, str(root))  # imported here: Calculon is importable only once its checkout is on the path
        import calculon
        from calculon.llm import Llm

        self.root, self.calculon, self.llm = root, calculon, Llm
        self.system = calculon.System(calculon.io.read_json_file(str(root / "systems" / f"{CALCULON_SYSTEM}.json")))
        self.log = logging.getLogger("calculon")
        self.log.setLevel(logging.INFO)  # Calculon's command line default (bin/calculon --verbosity)
        self._apps: dict[str, Any] = {}

    def application(self, stem: str) -> Any:
        """Calculon's ``Llm.Application`` for ``models/<stem>.json`` (read once)."""
        if stem not in self._apps:
            path = self.root / "models" / f"{stem}.json"
            self._apps[stem] = self.llm.Application(self.calculon.io.read_json_file(str(path)))
        return self._apps[stem]

    def evaluator(self, case: Case) -> Callable[[], float]:
        """One Calculon evaluation of ``case``: build the execution, compile, run, return the total time."""
        app, system, log, llm = self.application(case.calculon_model), self.system, self.log, self.llm
        exe_json = calculon_execution(case.plan, plait_fused_activation())

        def run() -> float:
            model = llm(app, log)
            model.compile(system, llm.Execution.from_json(exe_json))
            model.run(system)
            return float(model.get_total_time())

        return run


def time_alternating(first: Callable[[], float], second: Callable[[], float],
                     repeats: int, block: int = 1) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(CPU, wall) seconds of each of ``repeats`` calls of ``first`` and ``second``, in turn ``block`` calls at a
    time (A..A B..B A..A ...); CPU time is the thread's (``time.thread_time``)."""
    samples: tuple[list[tuple[float, float]], list[tuple[float, float]]] = ([], [])
    for _ in range(max(1, repeats // block)):
        for fn, out in zip((first, second), samples, strict=True):
            for _ in range(block):
                start, start_cpu = time.perf_counter(), time.thread_time()
                fn()
                out.append((time.thread_time() - start_cpu, time.perf_counter() - start))
    return samples


def _rate(samples: list[tuple[float, float]], which: int) -> float:
    """Evaluations per second: one over the median of CPU (``which`` 0) or wall (1) seconds."""
    return 1 / statistics.median(s[which] for s in samples)


def calculon_root(given: str | None) -> Path | None:
    """The Calculon checkout named by ``--calculon`` or ``$PLAIT_CALCULON_DIR``, if it looks like one."""
    path = given or os.environ.get(ENV_VAR)
    if not path or not (Path(path) / "calculon" / "llm" / "llm.py").is_file():
        return None
    return Path(path).resolve()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calculon", help=f"path of a Calculon checkout (default: ${ENV_VAR})")
    parser.add_argument("--repeats", type=int, default=400, help="timed evaluations per tool and plan")
    parser.add_argument("--block", type=int, default=10, help="consecutive evaluations of one tool before the other")
    args = parser.parse_args(argv)
    root = calculon_root(args.calculon)
    if root is None:
        print(GET_IT)
        return 0
    try:
        side = CalculonSide(root)
    except ImportError as error:
        print(f"Calculon at {root} does not import ({error}): pip install numpy pandas psutil")
        return 1
    load_before = os.getloadavg()
    print(f"{'plan (GPUs)':33s} {'plait CPU eval/s':>16s} {'Calculon CPU eval/s':>19s} {'ratio':>6s} "
          f"{'wall ratio':>10s} {'plait step s':>12s} {'Calculon step s':>15s}")
    ratios = []
    for case in CASES:
        ours, theirs = plait_evaluator(case), side.evaluator(case)
        ours_s, theirs_s = ours(), theirs()  # warm-up, and the predictions
        a, b = time_alternating(ours, theirs, args.repeats, args.block)
        rate_a, rate_b = _rate(a, 0), _rate(b, 0)
        ratios.append((rate_a / rate_b, case.name))
        label = f"{case.name} ({case.plan.num_gpus}){' *' if wants_simulation(case.plan) else ''}"
        print(f"{label:33s} {rate_a:16.1f} {rate_b:19.1f} {rate_a / rate_b:6.2f} {_rate(a, 1) / _rate(b, 1):10.2f} "
              f"{ours_s:12.2f} {theirs_s:15.2f}")
    worst, name = min(ratios)
    print(f"* plait times this pipeline by its event simulation (pp x micro-batches x vpp <= {SIMULATED_PASSES})")
    print(f"worst CPU ratio plait/Calculon {worst:.2f} ({name}); {args.repeats} evaluations each in alternating "
          f"blocks of {args.block}, rate = 1 / median; load average (1, 5, 15 min) "
          f"{'/'.join(f'{x:.2f}' for x in load_before)} before, {'/'.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"after, on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Data-parallel synchronization methods: the spec, the bytes each step sends (cost model
against what the runtime counted, as integers), and exactness where the maths is exact."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from plait.cost.sync import payload_bytes
from plait.errors import ConfigError
from plait.sync import parse
from plait.workload.catalog import get_model, resolve_model
from plait.workload.tensors import parameter_shapes
from tests.ranks import run_ranks

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "tiny-model.toml"
STEPS = 10
FULL_RANK = "powersgd:rank=1000000,min_compression_rate=0"  # every tensor compressed at a rank covering it
CASES = ["allreduce@sgd", f"{FULL_RANK}@sgd", "powersgd:rank=2@sgd", "bf16@adamw", "fp16@adamw",
         "local_sgd:every=1@sgd", "local_sgd:every=3@sgd", "allreduce@adamw", "powersgd:rank=2@adamw",
         "topk:ratio=1@adamw", "topk:ratio=0.01@adamw", "quantize:bits=8@adamw", "quantize:bits=4@adamw",
         "quantize:bits=1@adamw", "diloco:every=1,outer_lr=1,outer_momentum=0@sgd", "diloco:every=3@adamw",
         "pipe_sgd@adamw", "dreamddp:every=3@adamw", "dreamddp:every=40@sgd",
         "palsgd:every=3,p=0,outer_lr=0.7@adamw", "palsgd:every=3,p=0.3@adamw", "palsgd:every=3,warmup=10@adamw",
         "palsgd:every=3,p=0.3,warmup=4@adamw", "crossbow:learners=2@sgd", "crossbow:learners=2,alpha=0.3@adamw"]


def test_specs_are_parsed_to_a_canonical_form_and_refused_in_one_line() -> None:
    assert parse("allreduce").spec == "allreduce"
    assert parse(" powersgd:rank=4 ").spec == "powersgd:rank=4,min_compression_rate=2.0,start_iter=2"
    assert parse("diloco:every=500,outer_lr=0.5").spec == "diloco:every=500,outer_lr=0.5,outer_momentum=0.9"
    assert parse("local_sgd:every=8").every == 8 and parse("bf16").every == 1
    for bad, rule in (("hogwild", "must be one of"), ("powersgd", "needs rank"), ("powersgd:rank=0", "in [1,"),
                      ("powersgd:rank=2.5", "whole number"), ("topk:ratio=nan", "in [1e-09, 1]"),
                      ("quantize:bits=3", "bits must be one of 1, 4, 8"), ("local_sgd:every=2,every=3", "twice"),
                      ("bf16:rank=2", "key one of none"), ("diloco:every=x", "must be a number")):
        with pytest.raises(ConfigError, match=re.escape(rule)) as caught:
            parse(bad)
        assert "\n" not in str(caught.value)


def test_parameter_shapes_are_the_runtime_modules_and_count_every_parameter() -> None:
    torch = pytest.importorskip("torch")
    from plait.run.model import build_model

    spec = resolve_model(str(MODEL))
    built = [(name, tuple(p.shape)) for name, p in build_model(spec, spec.seq_len, seed=0).named_parameters()]
    assert parameter_shapes(spec) == built and torch is not None
    for name in ("llama3-8b", "gpt3-1.3b", "llama3-70b"):
        model = get_model(name)
        assert sum(math.prod(s) for _, s in parameter_shapes(model)) == model.total_params()


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, list[float]]]:
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("sync") / "sync.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = run_ranks(2, ["-m", "plait.run.converge", "--out", str(out), "--model", str(MODEL), "--steps", str(STEPS),
                         *CASES], env=env, cwd=str(out.parent))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_the_bytes_each_step_sends_are_the_cost_models(trained, case: str) -> None:  # type: ignore[no-untyped-def]
    """Every step's payload, counted at torch.distributed.all_reduce, equals the cost model's to the byte."""
    sync = parse(case.rpartition("@")[0])
    named = parameter_shapes(resolve_model(str(MODEL)))
    assert trained[case]["bytes"] == [payload_bytes(sync, named, step) for step in range(STEPS)]


@pytest.mark.parametrize("case, reference", [(f"{FULL_RANK}@sgd", "allreduce@sgd"),
                                             ("local_sgd:every=1@sgd", "allreduce@sgd"),
                                             ("topk:ratio=1@adamw", "allreduce@adamw"),
                                             ("diloco:every=1,outer_lr=1,outer_momentum=0@sgd", "allreduce@sgd"),
                                             ("palsgd:every=3,p=0,outer_lr=0.7@adamw", "diloco:every=3@adamw"),
                                             ("palsgd:every=3,warmup=10@adamw", "allreduce@adamw")])
def test_exact_methods_train_as_plain_data_parallelism(trained, case: str, reference: str) -> None:  # type: ignore[no-untyped-def]
    """PowerSGD at a rank covering every gradient, model averaging after every SGD step, top-k keeping every entry
    and DiLoCo taking the mean of the replicas after every inner SGD step (outer lr 1, no momentum) are the
    all-reduce; PALSGD with no pseudo-synchronization steps (p = 0) is DiLoCo, and in its warm-up plain data
    parallelism."""
    assert trained[case]["losses"] == pytest.approx(trained[reference]["losses"], rel=1e-5)


@pytest.mark.parametrize("case, reference", [
    ("powersgd:rank=2@sgd", "allreduce@sgd"), ("bf16@adamw", "allreduce@adamw"), ("fp16@adamw", "allreduce@adamw"),
    ("local_sgd:every=3@sgd", "allreduce@sgd"), ("powersgd:rank=2@adamw", "allreduce@adamw"),
    ("topk:ratio=0.01@adamw", "allreduce@adamw"), ("quantize:bits=8@adamw", "allreduce@adamw"),
    ("quantize:bits=4@adamw", "allreduce@adamw"), ("quantize:bits=1@adamw", "allreduce@adamw"),
    ("diloco:every=3@adamw", "allreduce@adamw"), ("pipe_sgd@adamw", "allreduce@adamw"),
    ("dreamddp:every=3@adamw", "allreduce@adamw"), ("palsgd:every=3,p=0.3@adamw", "diloco:every=3@adamw"),
    ("palsgd:every=3,p=0.3,warmup=4@adamw", "palsgd:every=3,p=0.3@adamw"),
    ("crossbow:learners=2,alpha=0.3@adamw", "allreduce@adamw")])
def test_lossy_methods_still_train(trained, case: str, reference: str) -> None:  # type: ignore[no-untyped-def]
    """Finite, falling losses; they differ from the all-reduce's (a lossy method that did not would send nothing
    less). How many more steps they need is the method's convergence multiplier, not asserted here."""
    losses, plain = trained[case]["losses"], trained[reference]["losses"]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    assert losses != plain


def test_crossbow_is_synchronous_model_averaging_of_every_learner(trained) -> None:  # type: ignore[no-untyped-def]
    """2 ranks of 2 learners each (crossbow:learners=2: alpha 1/4, central momentum 0.9) equal the paper's update
    written out here for 4 learners in one process (Koliousis et al. 2019, Algorithm 1): each learner takes a
    quarter of the global batch, ``c_j = alpha (w_j - z)``, ``w_j <- w_j - lr grad_j - c_j``,
    ``z <- z + sum_j c_j + momentum (z - z_prev)``; the loss is the learners' mean. The first 4 steps (the
    momentum acts from the second)."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the ranks run (two threads on the shared 2-core host: 30x the CPU time)
    try:
        assert trained["crossbow:learners=2@sgd"]["losses"][:4] == pytest.approx(_sma_reference(torch), rel=1e-5)
    finally:
        torch.set_num_threads(threads)


def _sma_reference(torch) -> list[float]:  # type: ignore[no-untyped-def]
    """The learners' mean loss in the first 4 steps of the 4-learner reference (the test above)."""
    import copy

    from plait.run.data import global_batch
    from plait.run.model import build_model
    from plait.run.train import cross_entropy

    spec = resolve_model(str(MODEL))
    n, alpha, momentum, lr = 4, 0.25, 0.9, 0.05  # lr: plait.run.converge's SGD
    first = build_model(spec, spec.seq_len, seed=0)
    learners = [first, *(copy.deepcopy(first) for _ in range(n - 1))]
    central = [p.detach().clone() for p in learners[0].parameters()]
    moved = [torch.zeros_like(z) for z in central]
    losses = []
    for step in range(4):
        inputs, targets = global_batch(step, 8, spec.seq_len)
        step_losses, corrections = [], []
        for j, learner in enumerate(learners):  # rank j // 2 holds learners j = 2 r, 2 r + 1, in batch order
            rows = slice(2 * j, 2 * j + 2)
            loss = cross_entropy(learner(inputs[rows]), targets[rows])
            grads = torch.autograd.grad(loss, list(learner.parameters()))
            step_losses.append(loss.item())
            with torch.no_grad():
                c = [alpha * (w - z) for w, z in zip(learner.parameters(), central)]
                for w, g, cj in zip(learner.parameters(), grads, c):
                    w -= lr * g + cj
            corrections.append(c)
        for i in range(len(central)):
            moved[i] = sum(c[i] for c in corrections) + momentum * moved[i]
            central[i] = central[i] + moved[i]
        losses.append(sum(step_losses) / n)
    return losses


def test_crossbow_clips_each_learner_by_its_own_norm() -> None:
    """Two learners of ``y = w . x`` (w = 0, loss the mean of y), one sample each: learner 0's own gradient is
    x_0 = (3, 4), norm 5, clipped at 1 to (0.6, 0.8); learner 1's, x_1 = (0.3, 0.4), norm 0.5, stays. SGD at lr 1
    then moves them to -(0.6, 0.8) and -(0.3, 0.4) (the pull is 0: both start at the central model). One norm over
    both (sqrt(25 + 0.25) = 5.02 at their own scale, 2.51 at the 1/2 the backward leaves) would clip learner 1
    too. The clip returns the larger learner's own norm, 5."""
    torch = pytest.importorskip("torch")
    from plait.run.crossbow import Crossbow, Learners

    class OneRank:  # the replicas: this rank alone, whose sum is its own
        size = 1

        def all_reduce(self, flat):  # type: ignore[no-untyped-def]
            done = torch.futures.Future()  # type: ignore[var-annotated]
            done.set_result([flat])
            return done

    model = torch.nn.Linear(2, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    learners = Learners(model, 2)
    optimizer = Crossbow(torch.optim.SGD(model.parameters(), lr=1.0), parse("crossbow:learners=2"), learners,
                         OneRank())  # type: ignore[arg-type]
    learners(torch.tensor([[3.0, 4.0], [0.3, 0.4]])).mean().backward()
    assert optimizer.clip(1.0) == pytest.approx(5.0)
    optimizer.step()
    moved = [r.weight.detach().flatten().tolist() for r in learners.replicas]
    assert moved[0] == pytest.approx([-0.6, -0.8], abs=1e-6) and moved[1] == pytest.approx([-0.3, -0.4], abs=1e-6)


def test_estimate_prices_each_method_and_refuses_what_it_cannot_run() -> None:
    """On one DGX H100 node's NVLink the all-reduce hides behind the backward and wins; on 100 Gbit/s Ethernet
    PowerSGD and local SGD send less and win. Methods where they cannot run are refused in one line."""
    from plait.engine.catalog import get_engine
    from plait.hardware.catalog import cluster_from_mapping, get_cluster
    from plait.plan.plan import Plan
    from plait.predict.estimate import estimate
    from tests.conftest import toy_cluster_mapping

    model = get_model("gpt3-1.3b")
    fast = get_cluster("dgx-h100-ib")
    slow = cluster_from_mapping(toy_cluster_mapping(network_gb_per_s=12.5), "toy-ethernet")
    steps = {}
    for cluster in (fast, slow):
        for spec in ("allreduce", "bf16", "powersgd:rank=4", "topk:ratio=0.01", "local_sgd:every=8"):
            plan = Plan(dp_replicate=16, global_batch=64, dp_sync=spec)
            steps[cluster.name, spec.partition(":")[0]] = estimate(model, cluster, plan,
                                                                   engine=get_engine()).step_time_s
    assert min((v, k[1]) for k, v in steps.items() if k[0] == fast.name)[1] in ("allreduce", "bf16")
    assert steps[slow.name, "powersgd"] < steps[slow.name, "bf16"] < steps[slow.name, "allreduce"]
    assert steps[slow.name, "local_sgd"] < steps[slow.name, "allreduce"]
    with pytest.raises(ConfigError, match="reduces each replica's whole gradient and needs sharding='none'"):
        estimate(model, fast, Plan(dp_shard=16, sharding="zero3", global_batch=64, dp_sync="bf16"), engine=get_engine())
    split = estimate(model, slow, Plan(tp=2, dp_replicate=8, global_batch=64, dp_sync="powersgd:rank=4"),
                     engine=get_engine())
    assert 0 < split.step_time_s < estimate(model, slow, Plan(tp=2, dp_shard=8, global_batch=64,
                                                              sharding="zero2"), engine=get_engine()).step_time_s
    for spec in ("local_sgd:every=8", "bf16"):  # the cp ranks of a replica average first, then the method runs
        assert estimate(model, fast, Plan(cp=2, dp_replicate=8, global_batch=64, dp_sync=spec),
                        engine=get_engine()).step_time_s > 0
        with pytest.raises(ConfigError, match="with cp=2 runs on unsharded replicas.*needs sharding='none'"):
            estimate(model, fast, Plan(cp=2, dp_shard=8, sharding="zero2", global_batch=64, dp_sync=spec),
                     engine=get_engine())
    with pytest.raises(ConfigError, match="averages whole replicas.*dp_replicate > 1"):
        estimate(model, fast, Plan(dp_shard=16, sharding="zero3", global_batch=64, dp_sync="diloco:every=8"),
                 engine=get_engine())
    with pytest.raises(ConfigError, match="dreamddp.*needs sharding='none'"):
        estimate(model, fast, Plan(dp_replicate=2, dp_shard=8, sharding="zero3", global_batch=64,
                                   dp_sync="dreamddp:every=8"), engine=get_engine())


def test_crossbow_prices_each_extra_learner_as_a_replica_and_its_passes() -> None:
    """A second learner per rank adds a replica's bf16 weights (2 B), fp32 gradients (4 B) and Adam state with fp32
    master weights (12 B) per parameter (plait.cost.memory's convention) and, on the critical path, one more
    optimizer step and 11 streaming fp32 passes over the parameters at the memory bandwidth (scale its gradient, the
    difference to the central model, the pull, the sum: plait.run.crossbow); the all-reduce of one model per rank
    stays. Refused where its learners are not whole replicas or do not divide the micro-batch."""
    from plait.cost.compute import memory_bytes_per_s
    from plait.engine.catalog import get_engine
    from plait.hardware.catalog import get_cluster
    from plait.plan.plan import Plan
    from plait.predict.estimate import estimate

    model, cluster = get_model("gpt3-1.3b"), get_cluster("dgx-h100-ib")
    one, two = (estimate(model, cluster, Plan(dp_replicate=8, global_batch=64, micro_batch=4,
                                              dp_sync=f"crossbow:learners={k}"), engine=get_engine()) for k in (1, 2))
    n = model.total_params()
    assert two.memory.total_bytes - one.memory.total_bytes == pytest.approx(n * (2 + 4 + 12), rel=1e-12)
    passes_s = 11 * 4 * n / memory_bytes_per_s(cluster.accelerator)
    assert two.step_time_s - one.step_time_s == pytest.approx(one.time.optimizer_s + passes_s, rel=1e-9)
    for plan, rule in ((Plan(dp_replicate=2, dp_shard=4, sharding="zero2", global_batch=64, micro_batch=4,
                             dp_sync="crossbow:learners=2"), "needs tp = pp = cp = 1 and sharding='none'"),
                       (Plan(dp_replicate=8, global_batch=48, micro_batch=3, dp_sync="crossbow:learners=2"),
                        "learners=2 must divide micro_batch=3")):
        with pytest.raises(ConfigError, match=re.escape(rule)):
            estimate(model, cluster, plan, engine=get_engine())


@pytest.mark.slow
def test_plait_run_trains_a_dp_sync_plan(tmp_path: Path) -> None:
    """`plait run` executes a plan's dp_sync (PowerSGD over DDP here) and the plan file carries it."""
    plan = tmp_path / "plan.toml"
    plan.write_text(f'[job]\nmodel = "{MODEL}"\n[plan]\ndp_replicate = 2\nglobal_batch = 8\nmicro_batch = 2\n'
                    'dp_sync = "powersgd:rank=2"\n')
    metrics = tmp_path / "m.jsonl"
    done = subprocess.run([sys.executable, "-m", "plait", "run", "--plan", str(plan), "--steps", "4",
                           "--metrics", str(metrics)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    losses = [json.loads(line)["loss"] for line in metrics.read_text().splitlines()]
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses) and "sync=powersgd" in done.stdout


@pytest.mark.parametrize("bits", [8, 4, 1])
def test_quantized_codes_round_trip_within_half_a_level(bits: int) -> None:
    """8 and 4 bits: every value within half a level of the scale; 1 bit: the sign, scaled by the mean magnitude."""
    torch = pytest.importorskip("torch")
    from plait.run.compress import dequantized, quantized

    x = torch.randn(1001, generator=torch.Generator().manual_seed(bits))
    packed, scale = quantized(x, bits)
    y = dequantized(packed, scale, bits, x.numel())
    assert packed.numel() == -(-x.numel() * bits // 8) and packed.dtype == torch.uint8
    if bits == 1:
        assert torch.equal(torch.sign(y), torch.where(x >= 0, 1.0, -1.0)) and torch.allclose(y.abs(), x.abs().mean())
    else:
        assert (x - y).abs().max() <= scale.item() / 2 + 1e-6


def test_the_planner_searches_the_methods_it_has_multipliers_for(tmp_path: Path) -> None:
    """`plait plan` searches every method with a steps multiplier (or those asked for) and ranks by time-to-target.
    On 10 Gbit/s Ethernet DiLoCo between two HSDP replicas wins; asked for PowerSGD alone, PowerSGD plans rank
    among the best 60 at their measured multiplier, ahead of every plain DDP plan (FSDP with a pipeline wins: its
    per-layer traffic overlaps, and a ZeRO-3 stage under PyTorch's pipelining gathers once a step); on a DGX H100 cluster the best plan keeps the all-reduce; `--dp-sync allreduce` searches the
    all-reduce alone; a method with no multiplier at its replica count is pruned with that reason."""
    import contextlib
    import io

    import yaml

    from plait.cli.main import run_cli
    from tests.conftest import toy_cluster_mapping

    slow = tmp_path / "ethernet.yaml"
    slow.write_text(yaml.safe_dump(toy_cluster_mapping(network_gb_per_s=1.25)))

    def search(cluster: str, *syncs: str, top: int = 5) -> dict:  # type: ignore[type-arg]
        out = io.StringIO()
        argv = ["plan", "--model", "gpt3-1.3b", "--cluster", cluster, "--gpus", "16", "--global-batch", "64",
                "--engine", "plait", "--top", str(top), "--json", *(a for s in syncs for a in ("--dp-sync", s))]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            assert run_cli(argv) == 0
        return json.loads(out.getvalue())

    winner = search(str(slow))["top"][0]  # DiLoCo between two HSDP replicas, at its cited multiplier
    assert winner["plan"]["dp_sync"].startswith("diloco:every=500,") and winner["plan"]["dp_replicate"] == 2
    assert winner["steps_multiplier"] == 1.0 and winner["steps_multiplier_basis"] == "cited"
    top = search(str(slow), "powersgd:rank=4", top=60)["top"]
    powersgd = [p for p in top if p["plan"]["dp_sync"].startswith("powersgd:rank=4,")]
    assert powersgd and powersgd[0]["steps_multiplier"] > 1 and "plait converge" in powersgd[0]["steps_multiplier_source"]
    assert not [p for p in top if p["plan"]["sharding"] == "none" and p["plan"]["pp"] == 1
                and p["plan"]["dp_sync"] == "allreduce"]
    assert search("dgx-h100-ib")["top"][0]["plan"]["dp_sync"] == "allreduce"
    assert {p["plan"]["dp_sync"] for p in search(str(slow), "allreduce")["top"]} == {"allreduce"}
    unknown = search(str(slow), "local_sgd:every=8")
    assert unknown["infeasible_by_reason"]["no steps multiplier for this synchronization method at this many replicas "
                                           "(plait converge measures one): its time-to-target is unknown"] > 0


def _split_shapes(layout: str) -> list[tuple[str, tuple[int, ...]]]:
    """The local parameter shapes of the rank that reports metrics (last stage, TP rank 0) under ``layout``."""
    from plait.workload.tensors import rank_shapes

    spec = resolve_model(str(MODEL))
    tp, pp = (2, 1) if layout.startswith("tp") else (1, 2)
    return rank_shapes(spec, tp, 0, spec.num_layers // pp, pp == 1, True)


@pytest.mark.slow
def test_model_parallel_replicas_synchronize_their_shards_exactly(tmp_path: Path) -> None:
    """Every method over replicas that are themselves split — HSDP (FSDP2 within each replica of 2 ranks), TP=2
    and PP=2 — each rank synchronizing its own shard with the same rank of the other replica. Exact where the maths
    is: local SGD and DiLoCo averaging after every step (DiLoCo with outer lr 1 and no momentum is that average)
    train as PyTorch's own PostLocalSGDOptimizer over 2 unsharded replicas that see the same rows (each replica
    clips its own gradient, so neither is the single-process run), and top-k keeping every entry and PowerSGD at
    full rank, run on the local gradients outside DDP (which takes neither TP nor PP), as DDP's all-reduce over 2
    whole replicas; all within 1e-5. DreamDDP over TP replicas and PALSGD (its pseudo-steps reported as NaN) over
    PP replicas train as over unsharded ones. Lossy ones still train. And every step's bytes, counted on the replica
    group, are the cost model's for that rank's local tensors (:func:`plait.workload.tensors.rank_shapes`)."""
    def run(nproc: int, body: str, name: str) -> tuple[list[float], list[int | None]]:
        plan, metrics = tmp_path / f"{name}.toml", tmp_path / f"{name}.jsonl"
        plan.write_text(f'[job]\nmodel = "{MODEL}"\n[plan]\nglobal_batch = 8\nmicro_batch = 2\n{body}\n')
        done = run_ranks(nproc, ["-m", "plait.run.worker", "--plan", str(plan), "--full-precision", "--steps", "4",
                                 "--metrics", str(metrics)])
        assert done.returncode == 0, done.stderr[-3000:]
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
        losses = [math.nan if row["loss"] is None else row["loss"] for row in rows]  # PALSGD's pseudo-steps: null
        return losses, [row.get("sync_bytes") for row in rows]

    def sent_as_predicted(spec: str, layout: str, counted: list[int | None]) -> bool:
        named = _split_shapes(layout)
        return counted == [payload_bytes(parse(spec), named, step) for step in range(len(counted))]

    averaged, _ = run(2, 'dp_replicate = 2\ndp_sync = "local_sgd:every=1"', "torch")
    reduced, _ = run(2, "dp_replicate = 2\n", "ddp")
    hsdp = 'dp_replicate = 2\ndp_shard = 2\nsharding = "zero3"\n'
    local, diloco = "local_sgd:every=1", "diloco:every=1,outer_lr=1,outer_momentum=0"
    for name, layout, spec, reference in (
            ("hsdp-diloco", hsdp, diloco, averaged),  # ShardAverage over DTensor shards: tp-local
            ("tp-local", "tp = 2\ndp_replicate = 2\n", local, averaged),
            ("pp-diloco", "pp = 2\ndp_replicate = 2\n", diloco, averaged),
            ("tp-topk", "tp = 2\ndp_replicate = 2\n", "topk:ratio=1", reduced),
            ("pp-powersgd", "pp = 2\ndp_replicate = 2\n", FULL_RANK, reduced)):
        got, counted = run(4, layout + f'dp_sync = "{spec}"', name)
        assert len(got) == 4 and got == pytest.approx(reference, rel=1e-5), name
        assert got[-1] < got[0]
        assert name == "hsdp-diloco" or sent_as_predicted(spec, layout, counted), (name, counted)
    # DreamDDP and PALSGD are not the all-reduce, but each runs the same over split replicas as over whole ones
    for spec, layout in (("dreamddp:every=2", "tp = 2\n"), ("palsgd:every=2,p=0.5", "pp = 2\n")):
        whole, _ = run(2, f'dp_replicate = 2\ndp_sync = "{spec}"', f"whole-{spec[:6]}")
        split, counted = run(4, layout + f'dp_replicate = 2\ndp_sync = "{spec}"', f"split-{spec[:6]}")
        assert len(split) == 4 and split == pytest.approx(whole, rel=1e-5, nan_ok=True), spec
        assert sent_as_predicted(spec, layout, counted), (spec, counted)
    # PowerSGD at rank 2 over TP: the vocab shard of the embedding no byte token falls in has an all-zero gradient
    # (quantize gathers over TP replicas as top-k does above; its bytes are checked on whole replicas)
    for spec, layout in (("pipe_sgd", "pp = 2\n"), ("powersgd:rank=2", "tp = 2\n")):
        got, counted = run(4, layout + f'dp_replicate = 2\ndp_sync = "{spec}"', f"lossy-{spec[:5]}")
        assert all(math.isfinite(x) for x in got) and got[-1] < got[0] and got != reduced, spec
        assert sent_as_predicted(spec, layout, counted), (spec, counted)


@pytest.mark.parametrize("every", [1, 3, 10, 40])
def test_dreamddp_averages_every_unit_once_per_period_in_backprop_order(every: int) -> None:
    """Each unit (head, blocks, embeddings) at one step of the period, the steps never decreasing along the backward
    pass, the period's steps together sending every parameter once; the closed form of the exposed seconds equals
    the direct sum over the period's runs of what each run's all-reduce leaves past the backward's end."""
    from plait.plan.ops import SCALAR
    from plait.plan.partial import _backprop_key, exposed_s, schedule, step_elements

    named = parameter_shapes(get_model("llama3-8b"))
    steps = schedule(named, every)
    ordered = [steps[u] for u in sorted(steps, key=_backprop_key)]
    assert ordered == sorted(ordered) and set(ordered) <= set(range(every)) and len(steps) == 32 + 2
    assert sum(step_elements(named, every, t) for t in range(every)) == sum(math.prod(s) for _, s in named)
    for reduce, backward in ((0.3, 1.0), (2.5, 1.0), (7.0, 0.5), (100.0, 1.0)):
        direct = sum(max(0.0, k * backward / every + reduce / every - backward) for k in range(every)) / every
        assert exposed_s(reduce, backward, every, SCALAR) == pytest.approx(direct, abs=1e-12)


def test_palsgd_costs_only_its_gradient_steps() -> None:
    """A PALSGD step is a gradient step with probability 1 - p and otherwise a pull toward the outer copy: on a
    DGX H100 node (synchronization all but free) its mean step is about 1 - p of DiLoCo's, and its MFU, counting
    only the FLOPs its gradient steps run, about DiLoCo's."""
    from plait.engine.catalog import get_engine
    from plait.hardware.catalog import get_cluster
    from plait.plan.plan import Plan
    from plait.predict.estimate import estimate

    model, fast = get_model("gpt3-1.3b"), get_cluster("dgx-h100-ib")
    plan = lambda spec: Plan(dp_replicate=8, global_batch=64, dp_sync=spec)  # noqa: E731
    diloco = estimate(model, fast, plan("diloco:every=64,outer_lr=0.25"), engine=get_engine())
    palsgd = estimate(model, fast, plan("palsgd:every=64,p=0.4"), engine=get_engine())
    assert palsgd.step_time_s == pytest.approx(0.6 * diloco.step_time_s, rel=0.03)
    assert palsgd.mfu == pytest.approx(diloco.mfu, rel=0.05)

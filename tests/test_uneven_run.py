"""Uneven work on ranks of unequal speed: an uneven batch split on a slowed rank and an uneven pipeline
stage split train with the even run's losses and weights (fp32, gloo, 2 ranks, examples/tiny-model.toml); the
expected values are the even run's, not the code's. What the runtime does not run unevenly is refused by name
before any rank starts."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plait.errors import ConfigError
from plait.run.uneven import Uneven, check_uneven, loss_weight, parse_uneven, rank_rows
from tests.inprocess import cli
from tests.ranks import run_ranks

torch = pytest.importorskip("torch")

ROOT = Path(__file__).parents[1]
MODEL = ROOT / "examples" / "tiny-model.toml"
STEPS = 3


def write_plan(path: Path, body: str) -> Path:
    path.write_text(f'[job]\nmodel = "{MODEL}"\n[plan]\nglobal_batch = 16\nmicro_batch = 4\n{body}\n')
    return path


def train(tmp: Path, name: str, body: str, *extra: str) -> tuple[list[dict[str, float]], dict[str, torch.Tensor]]:
    """Per-step metrics and the model's weights after the last step (its checkpoint, read back as one file)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    plan, metrics, folder = write_plan(tmp / f"{name}.toml", body), tmp / f"{name}.jsonl", tmp / name
    out = run_ranks(2, ["-m", "plait.run.worker", "--plan", str(plan), "--full-precision", "--steps", str(STEPS),
                        "--metrics", str(metrics), "--checkpoint-dir", str(folder), "--checkpoint-at", str(STEPS),
                        *extra], timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    dcp_to_torch_save(folder / f"step-{STEPS:08d}", tmp / f"{name}.pt")
    state = torch.load(tmp / f"{name}.pt", weights_only=False)
    weights = state["model"]  # every rank's parameters under their whole-model names (layers.3..., output)
    assert {"tok_embeddings.weight", "layers.3.attention.wq.weight", "output.weight"} <= weights.keys()
    return [json.loads(line) for line in metrics.read_text().splitlines()], weights


def assert_same_run(got: tuple[list[dict[str, float]], dict[str, torch.Tensor]],
                    even: tuple[list[dict[str, float]], dict[str, torch.Tensor]]) -> None:
    (rows, weights), (even_rows, even_weights) = got, even
    assert len(rows) == STEPS
    assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in even_rows], rel=1e-5)
    assert [r["grad_norm"] for r in rows] == pytest.approx([r["grad_norm"] for r in even_rows], rel=1e-5)
    assert weights.keys() == even_weights.keys()
    for key, value in weights.items():
        torch.testing.assert_close(value, even_weights[key], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("body", ["dp_replicate = 2", 'dp_shard = 2\nsharding = "zero2"',
                                  'dp_shard = 2\nsharding = "zero3"'])
def test_uneven_batch_split_equals_the_even_run(body: str, tmp_path: Path) -> None:
    """Poplar's speed-proportional split (12 sequences on the fast rank, 4 on the rank 3 times slower) against the
    same plan's even split (8 + 8)."""
    even = train(tmp_path, "even", body)
    assert_same_run(train(tmp_path, "uneven", body, "--batch-split", "12,4", "--slowdown", "1,3"), even)


@pytest.mark.slow
def test_uneven_stage_layers_equal_the_even_split(tmp_path: Path) -> None:
    """pp=2: 3 layers on the fast rank's stage and 1 on the slow rank's, against 2 + 2."""
    body = 'pp = 2\nschedule = "1f1b"'
    even = train(tmp_path, "even", body)
    assert_same_run(train(tmp_path, "uneven", body, "--stage-layers", "3,1", "--slowdown", "1,3"), even)


def test_slowdown_hooks_cut_every_stretch_of_compute() -> None:
    """One process, factor 3: the forward, the loss, each parameter's gradient and the optimizer step each end a
    stretch, and each stretch is followed by twice its length of sleep."""
    from plait.run.model import build_model
    from plait.run.slowdown import Clock, slow_down
    from plait.run.train import cross_entropy
    from plait.workload.catalog import resolve_model

    model = build_model(resolve_model(str(MODEL)), 64, 0)
    optimizer = torch.optim.AdamW(model.parameters())
    clock, loss_fn = slow_down([model], True, optimizer, cross_entropy, 3.0)
    ticks: list[float] = []
    tick = Clock.tick

    def counted(self: Clock) -> None:
        before = self.slept_s
        tick(self)
        ticks.append(self.slept_s - before)

    Clock.tick = counted  # type: ignore[method-assign]
    try:
        x = torch.randint(0, 256, (2, 64))
        start = time.perf_counter()
        loss_fn(model(x), x).backward()
        optimizer.step()
        wall_s = time.perf_counter() - start
    finally:
        Clock.tick = tick  # type: ignore[method-assign]
    params = sum(1 for p in model.parameters() if p.requires_grad)
    assert len(ticks) == 1 + 1 + params + 1  # forward, loss, each gradient, the optimizer step
    assert clock.slept_s == pytest.approx(sum(ticks))
    assert clock.slept_s == pytest.approx(2 / 3 * wall_s, rel=0.15)  # 2x the compute: 2/3 of the wall time


@pytest.mark.parametrize("zero3", [False, True])
def test_slowdown_cuts_an_fsdp2_model_at_its_blocks(zero3: bool, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """One gloo rank, FSDP2 per block and at the root (ZeRO-2 and ZeRO-3), factor 3, each FSDP2 all-gather,
    reduce-scatter, pre-forward and pre-backward made 20 ms longer (a slow network, or a peer not there yet): the sleep is twice the compute, 2/3
    of the wall time outside the collectives, not of the collectives too (FSDP2 runs the sharded parameters'
    post-accumulate-grad hooks after its reduce-scatter, so hooks there would stretch it), and no collective lies
    inside a stretch the clock stretches (ZeRO-3's re-gathers in the backward run in FSDP2's pre-backward hook on a
    block's output, before the hook that ends the head's stretch unless that one runs first)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group as group_module

    from plait.run.model import build_model
    from plait.run.slowdown import slow_down
    from plait.run.train import cross_entropy
    from plait.workload.catalog import resolve_model

    delays_s: list[float] = []
    spans: list[tuple[float, float]] = []  # each delayed collective's (start, end)
    stretches: list[tuple[float, float]] = []  # each stretch the clock ended: (its start, the tick)

    def slow(collective):  # type: ignore[no-untyped-def]
        def delayed(*args, **kwargs):  # type: ignore[no-untyped-def]
            start = time.perf_counter()
            time.sleep(0.02)
            out = collective(*args, **kwargs)
            delays_s.append(time.perf_counter() - start)
            spans.append((start, start + delays_s[-1]))
            return out
        return delayed

    def recorded(tick):  # type: ignore[no-untyped-def]
        def ticked(self):  # type: ignore[no-untyped-def]
            stretches.append((self._start_s, time.perf_counter()))
            tick(self)
        return ticked

    for name in ("foreach_all_gather", "foreach_reduce"):
        monkeypatch.setattr(group_module, name, slow(getattr(group_module, name)))
    # One rank gathers nothing (its shard is the whole parameter), so FSDP2's pre-forward and pre-backward hooks,
    # where a rank gathers and waits for its peers, are delayed themselves.
    from torch.distributed.fsdp._fully_shard._fsdp_state import FSDPState

    for name in ("_pre_forward", "_pre_backward"):
        monkeypatch.setattr(FSDPState, name, slow(getattr(FSDPState, name)))
    from plait.run.slowdown import Clock

    monkeypatch.setattr(Clock, "tick", recorded(Clock.tick))
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        model = build_model(resolve_model(str(MODEL)), 64, 0)
        for block in model.layers.values():
            fully_shard(block, mesh=mesh, reshard_after_forward=zero3)
        fully_shard(model, mesh=mesh, reshard_after_forward=zero3)
        optimizer = torch.optim.AdamW(model.parameters())
        clock, loss_fn = slow_down([model], True, optimizer, cross_entropy, 3.0)
        x = torch.randint(0, 256, (4, 64))
        loss_fn(model(x), x).backward()  # the first pass: FSDP2's lazy initialisation
        optimizer.step()
        before_s, start, delays_s[:], spans[:], stretches[:] = clock.slept_s, time.perf_counter(), [], [], []
        loss_fn(model(x), x).backward()
        optimizer.step()
        wall_s = time.perf_counter() - start
    finally:
        dist.destroy_process_group()
    assert len(delays_s) >= 3 * (len(model.layers) + 1)  # each block's and the root's: reduced, before forward and backward
    assert clock.slept_s - before_s == pytest.approx(2 / 3 * (wall_s - sum(delays_s)), rel=0.15)
    inside = [(a, b) for a, b in spans for s, t in stretches if s < a and b < t]
    assert not inside, f"{len(inside)} of {len(spans)} collectives inside a stretch"


def test_clock_sleeps_factor_minus_one_times_the_stretch() -> None:
    from plait.run.slowdown import Clock

    clock = Clock(4.0)
    start = time.perf_counter()
    clock.start()
    while time.perf_counter() - start < 0.02:
        pass
    clock.tick()
    assert clock.slept_s == pytest.approx(3 / 4 * (time.perf_counter() - start), rel=0.1)


def test_weights_and_rows_by_hand() -> None:
    assert [rank_rows((12, 4), r, 16, 2) for r in (0, 1)] == [(0, 12), (12, 16)]
    assert [loss_weight((12, 4), r, 16, 2) for r in (0, 1)] == [1.5, 0.5]
    assert [rank_rows((), r, 16, 2) for r in (0, 1)] == [(0, 8), (8, 16)]
    assert loss_weight((), 1, 16, 2) == 1.0


@given(st.lists(st.integers(1, 6), min_size=1, max_size=5), st.integers(0, 2**16))
def test_weighted_mean_of_local_means_is_the_global_mean(chunks: list[int], seed: int) -> None:
    """dp-average of ``loss_weight x`` each rank's mean loss = the mean over the global batch, for any split."""
    split, micro = tuple(2 * c for c in chunks), 2
    total, dp = sum(split), len(split)
    losses = torch.rand(total, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    averaged = sum(loss_weight(split, r, total, dp) * losses[slice(*rank_rows(split, r, total, dp))].mean()
                   for r in range(dp)) / dp
    assert float(averaged) == pytest.approx(float(losses.mean()), rel=1e-12)
    assert all(b % micro == 0 for b in split)


REFUSED = [
    ("dp_replicate = 2", ["--batch-split", "12,2"], "must sum to global_batch=16"),
    ("dp_replicate = 2", ["--batch-split", "14,2"], "multiple of micro_batch=4"),
    ("dp_replicate = 2", ["--batch-split", "8,4,4"], "one entry per data-parallel rank, dp=2"),
    ("dp_replicate = 2", ["--batch-split", "12,x"], "comma-separated ints"),
    ("tp = 2\ndp_replicate = 2", ["--batch-split", "12,4"], "unequal batches per replica with tp=2"),
    ('pp = 2\ndp_replicate = 2\nschedule = "1f1b"', ["--batch-split", "12,4"], "unequal batches per replica with pp=2"),
    ("dp_replicate = 2", ["--slowdown", "3"], "one factor per rank, 2 ranks"),
    ("dp_replicate = 2", ["--slowdown", "1,0.5"], "each factor must be finite and >= 1"),
    ("dp_replicate = 2", ["--slowdown", "1,inf"], "each factor must be finite and >= 1"),
    ('tp = 2\ndp_replicate = 2', ["--slowdown", "1,3,1,3"], "--slowdown with tp=2"),
    ("dp_replicate = 2", ["--local-steps", "8,4"], "takes dp_sync local_sgd"),
    ('dp_replicate = 2\ndp_sync = "local_sgd:every=4"', ["--local-steps", "8"], "one entry per data-parallel rank"),
    ('dp_replicate = 2\ndp_sync = "local_sgd:every=4"', ["--local-steps", "8,4", "--steps", "6"],
     "whole averaging rounds: a multiple of the plan's period every=4"),
    ('pp = 2\nschedule = "1f1b"', ["--stage-layers", "2,1"], "must sum to the model's num_layers=4"),
    ('pp = 2\nschedule = "1f1b"', ["--stage-layers", "4,0"], "at least one layer"),
    ("dp_replicate = 2", ["--stage-layers", "3,1"], "no pipeline (pp=1)"),
]


@pytest.mark.parametrize(("body", "options", "fragment"), REFUSED, ids=[r[2] for r in REFUSED])
def test_plait_run_refuses_before_any_rank_starts(body: str, options: list[str], fragment: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def no_launch(*_: object, **__: object) -> int:
        raise AssertionError("a rank was started")

    monkeypatch.setattr("plait.run.plan_run.run_local", no_launch)
    code, _, err = cli(["run", "--plan", str(write_plan(tmp_path / "plan.toml", body)), *options])
    assert code == 2 and fragment in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1


def test_uneven_options_take_a_plan_on_plaits_runtime(tmp_path: Path) -> None:
    code, _, err = cli(["run", "--plan", str(write_plan(tmp_path / "p.toml", "dp_replicate = 2")), "--engine",
                        "torchtitan", "--slowdown", "1,3"])
    assert code == 2 and "--slowdown 1,3: runs a --plan on plait's runtime" in err


def test_the_worker_refuses_by_itself(tmp_path: Path) -> None:
    out = run_ranks(2, ["-m", "plait.run.worker", "--plan", str(write_plan(tmp_path / "p.toml", "dp_replicate = 2")),
                        "--batch-split", "12,2"])
    assert out.returncode == 2 and "must sum to global_batch=16" in out.stderr


def test_the_checks_in_one_call() -> None:
    from plait.plan.plan import Plan

    plan = Plan(dp_replicate=2, global_batch=16, micro_batch=4)
    check_uneven(parse_uneven("1,3", "12,4", None), plan, 4)  # runnable: silent
    check_uneven(Uneven(), plan, 4)
    with pytest.raises(ConfigError, match="must sum to global_batch"):
        check_uneven(Uneven(batch_split=(8, 4)), plan, 4)


def test_plait_runs_prediction_shares_one_rank_per_group() -> None:
    """The uneven run as estimate_mixed sees it (plait.run.uneven_prediction): a share per rank, the run's split."""
    from plait.hardware.catalog import resolve_cluster
    from plait.plan.plan import Plan
    from plait.run.uneven_prediction import mixed_plan, predict_uneven
    from plait.workload.catalog import resolve_model

    ddp, pp = Plan(dp_replicate=2, global_batch=16, micro_batch=4), Plan(pp=2, global_batch=16, micro_batch=4)
    data = mixed_plan(ddp, Uneven(batch_split=(12, 4)), 4)
    pipe = mixed_plan(pp, Uneven(stage_layers=(3, 1)), 4)
    assert data is not None and [s.batch for s in data.shares] == [12, 4] and data.split == "data"
    assert pipe is not None and [s.layers for s in pipe.shares] == [(3,), (1,)] and pipe.split == "pipeline"
    assert mixed_plan(Plan(pp=2, dp_replicate=2, global_batch=16, micro_batch=4), Uneven(), 4) is None
    model, cluster = resolve_model(str(MODEL)), resolve_cluster("dgx-h100-ib")

    def step_s(plan: Plan, **uneven: tuple[float, ...]) -> float:
        est = predict_uneven(model, cluster, plan, Uneven(**uneven))  # type: ignore[arg-type]
        assert est is not None
        return est.step_time_s

    # equal ranks: the even split is the faster; rank 1 three times slower: the speed-proportional one is
    assert step_s(ddp, batch_split=(8, 8)) < step_s(ddp, batch_split=(12, 4))
    assert step_s(ddp, slowdown=(1.0, 3.0), batch_split=(12, 4)) < step_s(ddp, slowdown=(1.0, 3.0))

"""Asynchronous methods through server ranks: the simulation against hand cases and the closed form
the cost model uses, and the runtime's bytes, updates and staleness."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from plait.cost.async_sgd import step_s, worker_bytes
from plait.cost.sync import payload_bytes
from plait.events.async_sgd import simulate_async
from plait.sync import parse
from plait.workload.catalog import resolve_model
from plait.workload.tensors import parameter_shapes
from tests.ranks import run_ranks

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "tiny-model.toml"


def test_two_equal_workers_alternate_with_staleness_one() -> None:
    """Two workers of 1 s each, 0.1 s each way and 0.01 s to apply: each cycle takes 1.21 s, so two updates land
    per 1.21 s, and every update but the first was computed before the other worker's last one."""
    run = simulate_async([1.0, 1.0], 0.1, 0.1, 0.01, None, 100)
    assert run.updates_by_worker == (50, 50)
    assert run.staleness == {0: 0.01, 1: 0.99}
    assert run.updates_per_s == pytest.approx(2 / 1.21, rel=0.01)


def test_a_bound_of_zero_makes_the_fast_worker_wait() -> None:
    """With staleness bound 0 a worker 3x faster still contributes one update per slow one; unbounded, it
    contributes about three."""
    held = simulate_async([1.0, 3.0], 0.1, 0.1, 0.01, 0, 100)
    free = simulate_async([1.0, 3.0], 0.1, 0.1, 0.01, None, 100)
    assert held.updates_by_worker == (50, 50)
    assert free.updates_by_worker[0] > 2.5 * free.updates_by_worker[1]
    assert free.updates_per_s > 1.8 * held.updates_per_s


@pytest.mark.parametrize("workers, busy, transfer, apply", [(2, 1.0, 0.1, 0.01), (4, 1.0, 0.1, 0.01),
                                                            (8, 0.5, 0.2, 0.05), (16, 0.2, 0.05, 0.1)])
def test_the_closed_form_is_the_simulated_rate_of_equal_workers(workers: int, busy: float, transfer: float,
                                                                apply: float) -> None:
    """plait.cost.async_sgd's min(N / cycle, 1 / bottleneck) against the simulation over 200 cycles."""
    sync = parse("async_ps:staleness=1000")
    run = simulate_async([busy] * workers, transfer, transfer, apply, None, 200 * workers)
    assert step_s(sync, workers, busy, transfer, apply) == pytest.approx(workers / run.updates_per_s, rel=0.02)


def test_worker_bytes_by_hand() -> None:
    assert worker_bytes(parse("async_ps:staleness=2,servers=2"), 100) == 4 * (100 + 2 * 2)
    easgd = parse("easgd:alpha=0.5,every=3")
    assert [worker_bytes(easgd, 10, step) for step in range(6)] == [0, 0, 48, 0, 0, 48]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    """One launch of 2 workers and 2 server ranks, each method in turn from the same weights (worker 1 slowed
    0.05 s per iteration): the all-reduce (no server), asynchronous SGD and EASGD (one server), parameter servers
    on both server ranks."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("served") / "runs.json"
    done = run_ranks(4, ["-m", "plait.run.async_train", "--out", str(out), "--model", str(MODEL), "--workers", "2",
                         "--steps", "4", "--optimizer", "adamw", "--slow", "1:0.05", *(f"--spec={s}" for s in SPECS)],
                     env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())  # type: ignore[no-any-return]


SPECS = ["allreduce", "async_ps:staleness=100", "easgd:alpha=0.45,every=2", "param_server:servers=2,host=cpu"]


@pytest.mark.parametrize("spec", SPECS[1:])
def test_server_ranks_receive_the_predicted_bytes(served, spec: str) -> None:  # type: ignore[no-untyped-def]
    """Every worker's bytes per iteration are the cost model's; the asynchronous server applied one update per
    worker iteration, each at a staleness of at most the other worker's iterations; EASGD's exchanges move the
    centre and are not gradient updates."""
    sync, named = parse(spec), parameter_shapes(resolve_model(str(MODEL)))
    result = served[spec]
    for worker in result["workers"]:
        assert worker["bytes"] == [payload_bytes(sync, named, step) for step in range(4)]
        assert worker["losses"][-1] < worker["losses"][0]
    updates = [u for server in result["servers"] for u in server["updates"]]
    if sync.method == "async_ps":
        assert sorted(w for w, _, _ in updates) == [0] * 4 + [1] * 4
        assert all(0 <= stale <= 4 for _, stale, _ in updates)
    else:
        assert updates == []


def test_parameter_servers_on_cpu_ranks_train_as_the_all_reduce(served) -> None:  # type: ignore[no-untyped-def]
    """param_server with host=cpu: the 2 server ranks return the mean once both workers have pushed; each worker's
    losses equal the all-reduce's over the same 2 workers within 1e-5, and so does the final model's."""
    servers, reference = served["param_server:servers=2,host=cpu"], served["allreduce"]
    for worker, plain in zip(servers["workers"], reference["workers"]):
        assert worker["losses"] == pytest.approx(plain["losses"], rel=1e-5)
    assert servers["held_out_loss"] == pytest.approx(reference["held_out_loss"], rel=1e-5)

"""The one progress display (plait.progress): a bar on a terminal, nothing on a pipe or with --json; the
planner's pool reports from this process as its pieces complete."""

from __future__ import annotations

import io

import pytest
from inprocess import cli
from rich.console import Console

from plait import progress
from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.progress import LazyProgress
from plait.search.runner import run_search
from plait.search.space import default_space
from plait.workload.catalog import get_model


def _shown(console: Console, *, quiet: bool = False) -> str:
    with LazyProgress("searching plans", console=console, quiet=quiet) as bar:
        for done in range(0, 101, 10):
            bar(done, 100)
        bar.stage("measuring matmuls")
    return console.file.getvalue()  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def _no_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "DELAY_S", 0.0)


def test_a_terminal_sees_the_bar() -> None:
    out = _shown(Console(file=io.StringIO(), force_terminal=True, width=100))
    assert "searching plans" in out and "100/100" in out


def test_a_pipe_and_json_see_nothing() -> None:
    assert _shown(Console(file=io.StringIO(), force_terminal=False)) == ""
    assert _shown(Console(file=io.StringIO(), force_terminal=True), quiet=True) == ""


def test_stages_show_at_once_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "DELAY_S", 3600.0)  # counted work would wait; a stage does not
    console = Console(file=io.StringIO(), force_terminal=True, width=100)
    with LazyProgress("calibrate", console=console) as bar:
        bar.stage("measuring matmuls")
    assert "calibrate: measuring matmuls" in console.file.getvalue()  # type: ignore[attr-defined]


def test_commands_print_no_progress_on_a_pipe() -> None:
    code, out, err = cli(["validate", "gnn"])
    assert code == 0 and err == "" and "MAPE" in out


def test_the_pool_reports_each_piece_from_this_process() -> None:
    model, cluster = get_model("llama3-8b"), get_cluster("dgx-h100-ib")
    space = default_space(model, cluster, 64, (512,))
    seen: list[tuple[int, int]] = []
    pooled = run_search(model, cluster, space, workers=2, progress=lambda done, total: seen.append((done, total)),
                        engine=get_engine())
    serial = run_search(model, cluster, space, workers=1, engine=get_engine())
    assert [e.plan for e in pooled.top(5)] == [e.plan for e in serial.top(5)]
    assert len(seen) > 2 and [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert seen[-1] == (pooled.num_candidates, pooled.num_candidates)

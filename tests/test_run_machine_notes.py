"""What `plait run` says a plan does not do on this machine: offload on CPU ranks moves nothing between host and
device; in-network aggregation runs emulated on point-to-point sends (bytes exact: tests/test_sync_architectures.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from plait.plan.plan import Plan
from plait.run.plan_run import machine_notes
from plait.sync import parse
from tests.inprocess import cli

ROOT = Path(__file__).resolve().parents[1]
MOVES_NOTHING = "moves nothing between host and device on CPU ranks"


def _plan_file(folder: Path, cluster: str, plan: str) -> Path:
    path = folder / "plan.toml"
    path.write_text(f'[job]\nmodel = "{ROOT / "examples" / "tiny-model.toml"}"\ncluster = "{cluster}"\n\n'
                    f"[plan]\nmicro_batch = 2\nglobal_batch = 8\n{plan}\n", encoding="utf-8")
    return path


def test_offload_notes_name_what_is_offloaded_and_only_on_cpu_ranks() -> None:
    both = Plan(dp_shard=2, sharding="zero3", global_batch=8, offload_optimizer=True, offload_params=True)
    [note] = machine_notes(both, on_gpu=False)
    assert note.startswith("plait: note: offloading the parameters and optimizer state ") and MOVES_NOTHING in note
    assert "\n" not in note and machine_notes(both, on_gpu=True) == []
    assert machine_notes(Plan(dp_replicate=2, global_batch=8), on_gpu=False) == []
    switch = Plan(dp_replicate=2, global_batch=8, dp_sync=parse("switch_aggregation"))
    assert [n for n in machine_notes(switch, on_gpu=True) if "emulated" in n and "switch_aggregation" in n]


@pytest.mark.parametrize("plan", ["dp_replicate = 2\noffload_optimizer = true",
                                  'dp_shard = 2\nsharding = "zero3"\noffload_optimizer = true\noffload_params = true'])
def test_a_cpu_run_of_an_offload_plan_says_so_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          plan: str) -> None:
    from plait.run import plan_run

    monkeypatch.setattr(plan_run, "local_slots", lambda: None)  # CPU ranks, whatever this machine has
    monkeypatch.setattr(plan_run, "run_local", lambda config, gpus, restarts, log_folder: 0)
    code, out, err = cli(["run", "--plan", str(_plan_file(tmp_path, "dgx-h100-ib", plan)), "--dry-run"])
    assert code == 0, err
    assert len([line for line in out.splitlines() if MOVES_NOTHING in line]) == 1, out


def test_a_switch_plan_is_refused_in_one_line_where_no_tier_aggregates(tmp_path: Path) -> None:
    code, out, err = cli(["run", "--plan", str(_plan_file(tmp_path, "a100-roce-1600", "dp_replicate = 2\n"
                                                          'dp_sync = "switch_aggregation"')), "--dry-run"])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "needs switches that aggregate" in err and "tier 'nvlink'" in err


@pytest.mark.slow
def test_a_switch_plan_for_an_nvlink_sharp_preset_trains_on_cpu_ranks(tmp_path: Path) -> None:
    """The plan the planner may choose on dgx-h100-ib (NVLS within a node) trains here, emulated, and says so."""
    plan = _plan_file(tmp_path, "dgx-h100-ib", 'dp_replicate = 2\ndp_sync = "switch_aggregation"')
    done = subprocess.run([sys.executable, "-m", "plait", "run", "--plan", str(plan), "--steps", "2",
                           "--full-precision"], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "dp_sync=switch_aggregation:bits=32 is emulated" in done.stdout
    assert "step 2: loss" in done.stderr and "sync=switch_aggregation:bits=32 on 2 ranks" in done.stdout

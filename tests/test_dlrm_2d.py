"""2D sparse parallelism (000-09): a DLRM's tables sharded within groups of 2 of 4 gloo ranks by TorchRec's
``DMPCollection``, the groups averaged after each step; the losses equal one process's on the same global batches,
every byte counted equals plait's prediction; ``plait plan`` searches the group size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plait.workloads.dlrm.cost import Placement, rank_loads
from plait.workloads.dlrm.model import DlrmSpec, Table, read_dlrm
from plait.workloads.dlrm.predict import parse_placements
from plait.workloads.dlrm.worker import train
from tests.inprocess import cli
from tests.ranks import run_ranks

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "dlrm-tiny.toml"
PLACEMENTS = "t0=row_wise,t1=column_wise@0+1,t2=table_wise@0,t3=data_parallel"
WORLD, GROUP, BATCH, STEPS = 4, 2, 2, 3


def test_replicas_average_every_held_row_and_its_state() -> None:
    """100 x 4 fp32 rows of one table, row-wise over a group of 2 with 2 replicas: each rank holds 50 rows (800 B)
    and their 50 fp32 AdaGrad states (200 B), and all-reduces both after every step."""
    one = DlrmSpec("one", 13, (16, 4), (8, 1), (Table("t", rows=100, dim=4, pooling=2.0),))
    for load in rank_loads(one, [Placement("t", "row_wise", (0, 1))], group=2, replicas=2, batch=3, node=2):
        assert (load.replica_weight_bytes, load.replica_state_bytes) == (800, 200)


def test_dmp_collection_trains_as_one_process_would_and_sends_the_predicted_bytes(tmp_path: Path) -> None:
    """Row-wise, column-wise, table-wise and data-parallel tables in groups of 2; the single process is plain
    PyTorch SGD on the unsharded model and the global batch of all 4 ranks."""
    pytest.importorskip("torchrec")
    out = tmp_path / "run.json"
    done = run_ranks(WORLD, ["-m", "plait.workloads.dlrm.worker", "--model", str(MODEL), "--placements", PLACEMENTS,
                             "--batch", str(BATCH), "--steps", str(STEPS), "--sparse-group", str(GROUP),
                             "--out", str(out)], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(out.read_text())
    spec = read_dlrm(MODEL)
    placements = parse_placements(PLACEMENTS, spec, GROUP)
    single = train(spec, placements, BATCH, STEPS, "sgd", reference_ranks=WORLD)
    assert measured["losses"] == pytest.approx(single["losses"], abs=1e-5)
    assert len(set(measured["losses"])) == STEPS  # the model moves
    loads = rank_loads(spec, placements, GROUP, WORLD // GROUP, BATCH, GROUP)
    for rank, counted in enumerate(measured["bytes"]):
        load = loads[rank // (WORLD // GROUP)]  # DMPCollection's strided groups: rank k is k // (W/g) in its group
        assert counted == {"pooled_forward": load.pooled_out, "pooled_backward": load.pooled_in,
                           "inputs": load.index_out, "headers": load.header_bytes,
                           "replica_sync": load.replica_weight_bytes}  # SGD: no optimizer state to average


def test_plan_searches_every_group_size_and_agrees_with_estimate(tmp_path: Path) -> None:
    """``plait plan`` costs the divisors of 16 as sparse group sizes; each step equals ``plait estimate
    --sparse-group``'s for that size, and the winner is the fastest; its export holds the run command."""
    pytest.importorskip("torchrec")
    args = ["--model", str(MODEL), "--gpus", "16", "--global-batch", "65536", "--json"]
    code, out, err = cli(["plan", *args, "--export", str(tmp_path)])
    assert code == 0, err
    planned = json.loads(out)
    steps = {o["group"]: o["step_time_s"] for o in planned["sparse_groups"]}
    assert sorted(steps) == [1, 2, 4, 8, 16]
    for group, step in steps.items():
        code, out, err = cli(["estimate", *args, "--sparse-group", str(group)])
        assert code == 0, err
        assert json.loads(out)["step_time_s"] == pytest.approx(step, rel=1e-12)
    winner = planned["plait"]["group"]
    assert winner == min(steps, key=steps.__getitem__)
    command = (tmp_path / "run_command.txt").read_text()
    assert f"--sparse-group {winner} " in command if winner < 16 else "--sparse-group" not in command


def test_run_refuses_a_group_that_does_not_divide_the_ranks_or_a_plan_without_tables() -> None:
    code, _, err = cli(["run", "--model", str(MODEL), "--gpus", "4", "--global-batch", "8", "--sparse-group", "3",
                        "--dry-run"])
    assert code == 2 and "group=3 must divide gpus=4" in err
    code, _, err = cli(["run", "--plan", str(ROOT / "examples" / "tiny-plan.toml"), "--sparse-group", "2", "--dry-run"])
    assert code == 2 and "--sparse-group=2: places a DLRM's tables" in err

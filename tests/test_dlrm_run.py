"""A DLRM plan trained by TorchRec on 2 gloo ranks: the losses equal one process's on the same global
batches, and every byte its embedding collectives send equals plait's prediction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plait.workloads.dlrm.cost import rank_loads
from plait.workloads.dlrm.model import read_dlrm
from plait.workloads.dlrm.predict import parse_placements
from plait.workloads.dlrm.worker import train
from tests.ranks import run_ranks

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "dlrm-tiny.toml"
PLACEMENTS = "t0=row_wise,t1=column_wise@0+1,t2=table_wise@0,t3=data_parallel"
BATCH, STEPS = 4, 3


def test_torchrec_trains_plaits_placement_as_one_process_would_and_sends_the_predicted_bytes(tmp_path: Path) -> None:
    """Every TorchRec sharding type but table-row-wise (which needs two nodes) in one plan; the single process is
    plain PyTorch SGD on the unsharded model (no TorchRec sharding, no fused optimizer)."""
    pytest.importorskip("torchrec")
    out = tmp_path / "run.json"
    done = run_ranks(2, ["-m", "plait.workloads.dlrm.worker", "--model", str(MODEL), "--placements", PLACEMENTS,
                         "--batch", str(BATCH), "--steps", str(STEPS), "--out", str(out)], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(out.read_text())
    spec = read_dlrm(MODEL)
    placements = parse_placements(PLACEMENTS, spec, 2)
    single = train(spec, placements, BATCH, STEPS, "sgd", reference_ranks=2)
    assert measured["losses"] == pytest.approx(single["losses"], abs=1e-5)
    assert len(set(measured["losses"])) == STEPS  # the model moves
    for counted, load in zip(measured["bytes"], rank_loads(spec, placements, 2, 1, BATCH, 2), strict=True):
        assert counted == {"pooled_forward": load.pooled_out, "pooled_backward": load.pooled_in,
                           "inputs": load.index_out, "headers": load.header_bytes}

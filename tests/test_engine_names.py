"""Engine names a user or a measured row writes resolve to what the catalog knows, with a warning: a version the
catalog lacks to the nearest known version of the same engine, a family name to its engine. Each workload kind gets
the engine that runs it, and the runs schema's ``system`` column takes a user's cluster file."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest
from inprocess import cli

from plait.engine.catalog import engine_names, get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import load_cluster_file
from plait.validate.runs import read_runs
from plait.validate.translate import row_cluster
from plait.workloads import get_kind

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("asked, spec", [
    ("nemo@24.11", "nemo@24.07"), ("nemo@25.05", "nemo@24.07"),  # the catalog's only NeMo version
    ("megatron-lm@2023", "megatron-lm@2022"), ("deepspeed@0.15", "deepspeed@0.16"),  # nearest of two versions
    ("megatron-lm", "megatron-core@0.14"),  # Megatron-LM trains on Megatron-Core today
    ("nemo", "nemo@24.07"), ("megatron-bridge", "megatron-bridge@25.11"),  # engines known only at a version
])
def test_names_resolve_with_the_reason(asked: str, spec: str) -> None:
    engine = get_engine(asked)
    assert engine.spec == spec
    assert asked in engine.resolved and spec in engine.resolved


def test_catalog_names_resolve_silently_and_unknown_ones_are_refused() -> None:
    for key in engine_names():
        assert get_engine(key).resolved == ""
    with pytest.raises(ConfigError, match="unknown engine pytorch-lightning"):
        get_engine("pytorch-lightning")
    with pytest.raises(ConfigError, match="unknown engine nemo@next"):
        get_engine("nemo@next")


def test_estimate_warns_of_the_resolved_engine() -> None:
    code, out, err = cli(["estimate", "--engine", "nemo@24.11", "--json"])
    assert code == 0, err
    est = json.loads(out)
    assert est["engine"] == "nemo@24.07"
    assert any("nemo@24.11 is not in the catalog" in w for w in est["warnings"])


def test_each_kind_declares_what_runs_it() -> None:
    assert get_engine(get_kind("traced").engine).launchable  # torch.distributed DDP/FSDP2/pipelining: plait's
    for name in ("dlrm", "gnn", "dit"):
        assert get_kind(name).runtime and get_kind(name).engine is None
    code, _, err = cli(["estimate", "--model", "examples/dlrm-small.toml", "--engine", "megatron-core"])
    assert code == 2 and "TorchRec" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("model, runtime", [("examples/gnn-tiny.toml", "PyG or DGL"), ("examples/dit-tiny.toml", "xDiT")])
def test_simulate_refuses_an_engine_for_a_kind_its_own_runtime_prices(model: str, runtime: str) -> None:
    code, out, err = cli(["simulate", "--model", model, "--engine", "megatron-core"])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--engine megatron-core" in err and runtime in err and "leave --engine out" in err


def test_runs_system_takes_a_cluster_file(tmp_path: Path) -> None:
    shutil.copy(ROOT / "examples" / "my-cluster.yaml", tmp_path / "my-cluster.yaml")
    rows = list(csv.DictReader(io.StringIO((ROOT / "src" / "plait" / "validate" / "data" / "dev.csv").read_text())))
    row = {**rows[0], "system": "my-cluster.yaml", "gpu": "", "model_config": ""}
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerow(row)
    (tmp_path / "runs.csv").write_text(out.getvalue())
    (parsed,) = read_runs(tmp_path / "runs.csv")
    assert row_cluster(parsed) == load_cluster_file(tmp_path / "my-cluster.yaml")
    (tmp_path / "runs.csv").write_text(out.getvalue().replace("my-cluster.yaml", "missing.yaml"))
    with pytest.raises(ConfigError, match="missing.yaml"):
        read_runs(tmp_path / "runs.csv")

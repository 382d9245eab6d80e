"""DeepLearningExamples' DLRM as plait runs it for ``plait validate dlrm``: its table placement, its hybrid step's
parts and the shipped rows (``plait/validate/data/dlrm_steps.csv``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from plait.cost.compute import memory_bytes_per_s
from plait.hardware.catalog import get_cluster
from plait.validate.datasets import dataset_path
from plait.workloads.dlrm.dense import bottom_s, top_s
from plait.workloads.dlrm.hybrid import buckets, device_tables, hybrid_step, lookup_bytes
from plait.workloads.dlrm.model import Table, read_dlrm
from plait.workloads.dlrm.validate import validate_dlrm

MODELS = dataset_path("dlrm").parent / "models"


def test_tables_fill_buckets_as_distribute_to_buckets_does() -> None:
    """Worked by hand from DeepLearningExamples' greedy pass (dlrm/utils/distributed.py): rows 10, 9, 8, 1 into two
    buckets of at most two tables: 10 opens the first bucket, 9 goes to the emptier second, 8 joins 9 (the bucket
    of fewer rows) and closes it, 1 joins 10."""
    assert buckets([10, 9, 8, 1], 2) == [[1, 2], [0, 3]]
    assert device_tables([10, 9, 8, 1], 2) == [[1, 2], [0, 3]]
    placed = device_tables(list(range(26, 0, -1)), 8)  # above 4 GPUs rank 0 keeps the bottom MLP alone
    assert placed[0] == [] and sorted(i for b in placed for i in b) == list(range(26))
    assert max(map(len, placed)) == 4  # ceil(26 / 7)


def test_one_gpu_step_has_no_collectives_and_runs_the_bottom_mlp_on_the_whole_batch() -> None:
    spec = read_dlrm(MODELS / "dlrm-criteo-fl15.toml")
    cluster = get_cluster("dgx-a100-ib")
    step = hybrid_step(spec, cluster, 1, 32768, "tf32")
    assert step.all_to_all_s == step.all_reduce_s == 0.0
    assert step.bottom_s > bottom_s(spec, cluster.accelerator, 32768, "tf32")  # plus every table's lookups
    assert step.top_s == top_s(spec, cluster.accelerator, 32768, "tf32")


def test_eight_gpus_run_the_bottom_mlp_on_rank_0_for_the_global_batch() -> None:
    """The bottom MLP is model-parallel: rank 0 runs it on all 65,536 samples, the top part runs on 8,192 a rank."""
    spec = read_dlrm(MODELS / "dlrm-criteo-fl3.toml")
    cluster = get_cluster("dgx-a100-ib")
    acc = cluster.accelerator
    step = hybrid_step(spec, cluster, 8, 65536, "fp16")
    assert step.bottom_s >= bottom_s(spec, acc, 65536, "fp16")
    assert step.top_s == top_s(spec, acc, 8192, "fp16")
    assert step.all_to_all_s > 0 and step.all_reduce_s > 0


def test_mixed_precision_is_faster_but_pays_the_casts_of_fp32_tables() -> None:
    """A step in fp16 is shorter than in TF32, and longer with fp32 tables (cast to fp16 and back) than with fp16
    ones of the same rows."""
    spec = read_dlrm(MODELS / "dlrm-criteo-fl15.toml")
    cluster = get_cluster("dgx-a100-ib")
    amp, tf32 = (hybrid_step(spec, cluster, 1, 32768, p).step_s for p in ("fp16", "tf32"))
    assert amp < tf32
    from dataclasses import replace

    half = replace(spec, tables=tuple(replace(t, dtype="fp16") for t in spec.tables))
    assert hybrid_step(half, cluster, 1, 32768, "fp16").bottom_s < hybrid_step(spec, cluster, 1, 32768, "fp16").bottom_s


def test_lookup_bytes_follow_the_examples_kernels() -> None:
    """Bytes per element of a one-hot fp32 table of width 128, counted by hand from the example's code: across GPUs
    in mixed precision the row read (4) and the output written (4), its cast to fp16 and back (4 + 2, 2 + 4), the
    SGD update's scaled copy of the values (4 + 4) and ``index_add_`` (values 4, row 4 + 4): 40; on one GPU in fp32
    the fused gather's row read and output (4 + 4), its backward copy into the values (4 + 4) and the same update
    (8 + 12): 36."""
    table = Table(name="t", rows=10**6, dim=128)
    elements = 1000 * 128
    assert lookup_bytes(table, 1000, 2, fused=False) == 40 * elements
    assert lookup_bytes(table, 1000, 4, fused=True) == 36 * elements


def test_a_grad_scaler_unscales_every_fp32_row_looked_up_and_reads_its_flag_once() -> None:
    """``GradScaler.unscale_`` reads and writes the sparse gradient's fp32 values, one row per id: 4 + 4 bytes an
    element more; ``step`` reads the overflow flag back, one synchronization. Mixed precision only (the 21.10 loop's
    ``GradScaler(enabled=FLAGS.amp)``)."""
    from plait.cost.host import sync_s

    table = Table(name="t", rows=10**6, dim=128)
    elements = 1000 * 128
    assert lookup_bytes(table, 1000, 2, fused=False, unscaled=True) == (40 + 8) * elements
    assert lookup_bytes(table, 1000, 2, fused=True, unscaled=True) - lookup_bytes(table, 1000, 2, fused=True) \
        == 8 * elements
    spec = read_dlrm(MODELS / "dlrm-criteo-fl15.toml")
    cluster = get_cluster("dgx-a100-ib")
    plain, scaled = (hybrid_step(spec, cluster, 1, 32768, "fp16", grad_scaler=g) for g in (False, True))
    unscale_s = sum(8 * 32768 * t.dim for t in spec.deep_tables) / memory_bytes_per_s(cluster.accelerator)
    assert scaled.bottom_s - plain.bottom_s == pytest.approx(unscale_s)
    assert scaled.scaler_sync_s == sync_s(cluster) > 0.0 == plain.scaler_sync_s
    tf32 = hybrid_step(spec, cluster, 1, 32768, "tf32")
    assert hybrid_step(spec, cluster, 1, 32768, "tf32", grad_scaler=True) == tf32


def test_every_shipped_row_is_predicted() -> None:
    results = validate_dlrm(dataset_path("dlrm"))
    assert len(results) == 50 and all(r.error_pct is not None for r in results)


def test_a_row_outside_the_model_says_why(tmp_path: Path) -> None:
    text = dataset_path("dlrm").read_text().splitlines()
    header, row = text[0], text[1].replace(",A100-SXM4-80GB,", ",H42,")
    path = tmp_path / "rows.csv"
    path.write_text(header + "\n" + row + "\n")
    (result,) = validate_dlrm(path)
    assert result.error_pct is None and result.why_not == "no preset system of H42 GPUs, and no packaged accelerator of that name"


@pytest.mark.parametrize("bad", ["-5", "abc"])
def test_a_bad_measured_value_is_refused(tmp_path: Path, bad: str) -> None:
    from plait.errors import ConfigError

    lines = dataset_path("dlrm").read_text().splitlines()
    cells = lines[1].split(",records_per_s,")[0].rsplit(",", 1)
    path = tmp_path / "rows.csv"
    path.write_text(lines[0] + "\n" + cells[0] + "," + bad + ",records_per_s," + lines[1].split(",records_per_s,")[1] + "\n")
    with pytest.raises(ConfigError, match="measured_value"):
        validate_dlrm(path)

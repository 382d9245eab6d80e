"""The replicas' all-reduce across sites runs hierarchically (:mod:`plait.run.sites`): on 4 gloo ranks
laid out as two sites of 2 it sums exactly, and every method that all-reduces trains as over the flat ring and
sends the bytes the cost model predicts."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import yaml

from plait.cost.sync import payload_bytes
from plait.sync import parse
from plait.workload.catalog import resolve_model
from plait.workload.tensors import parameter_shapes
from tests.conftest import toy_cluster_mapping
from tests.ranks import run_ranks

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "tiny-model.toml"
STEPS = 4
EXACT = ["allreduce@sgd", "local_sgd:every=2@sgd", "diloco:every=2@adamw", "pipe_sgd@adamw", "dreamddp:every=2@adamw"]
"""Every way a method reaches the reducer: DDP's hook, the flat-buffer average (local SGD; PALSGD's is the same
``_averaged``), DiLoCo's outer all-reduce, and the asynchronous ones (Pipe-SGD's step, DreamDDP's per-parameter)."""
PER_TIER = ["site_topk:ratio=1@sgd", "site_quantize:bits=32@sgd"]
"""Compressed across sites only, at a ratio (a width) that keeps every element: the flat all-reduce's losses, its own
bytes per tier."""
ROUNDED = ["bf16@adamw"]
"""Summed in 16 bits in another order than the flat ring's: equal within the format's rounding only (fp16 takes the
same hook)."""


def two_sites_of_two(path: Path) -> Path:
    """The toy cluster as two sites of 2 ranks joined by a wide-area tier."""
    raw = toy_cluster_mapping()
    raw["gpus_per_node"] = raw["scale_up_domain_gpus"] = 2
    raw["tiers"] = [{**raw["tiers"][0], "span_gpus": 2},
                    {**raw["tiers"][1], "name": "wan", "span_gpus": 4, "wide_area": True}]
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture(scope="module")
def site_ranks() -> list[dict]:  # type: ignore[type-arg]
    """What each of 4 gloo ranks laid out as sites found (tests/sites_ranks.py), in rank order."""
    pytest.importorskip("torch")
    done = run_ranks(4, ["-m", "tests.sites_ranks"], cwd=str(ROOT), env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return sorted((json.loads(line) for line in done.stdout.splitlines()), key=lambda r: r["rank"])


def test_the_hierarchical_all_reduce_sums_exactly_in_the_groups_of_each_site(site_ranks) -> None:  # type: ignore[no-untyped-def]
    ranks = site_ranks
    assert [r["world"] for r in ranks] == [["SiteReducer", [0, 1], [0, 2]], ["SiteReducer", [0, 1], [1, 3]],
                                           ["SiteReducer", [2, 3], [0, 2]], ["SiteReducer", [2, 3], [1, 3]]]
    for r in ranks:
        assert r["sum7"] and r["sum8"] and r["strided"] == ["SiteReducer", True] and r["none"]
        assert r["ordered"] == [[4.0 * i] * 5 for i in range(3)]  # async all-reduces complete in the order started
        assert r["uneven"] == r["one_site"] == "Reducer"  # sites of unequal shares, or one site: the flat ring


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, dict[str, list[float]]]]:
    pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("sites")
    cluster = two_sites_of_two(folder / "two-sites.yaml")
    results = {}
    for name, extra in (("flat", []), ("sites", ["--cluster", str(cluster)])):
        out = folder / f"{name}.json"
        done = run_ranks(4, ["-m", "plait.run.converge", "--out", str(out), "--model", str(MODEL), "--steps",
                             str(STEPS), *extra, *EXACT, *ROUNDED, *PER_TIER], env={**os.environ, "OMP_NUM_THREADS": "1"},
                         cwd=str(folder))
        assert done.returncode == 0, done.stderr[-3000:]
        results[name] = json.loads(out.read_text())
    return results


@pytest.mark.slow
@pytest.mark.parametrize("case", EXACT + ROUNDED)
def test_methods_train_across_sites_as_over_the_flat_ring_and_send_the_predicted_bytes(trained, case: str) -> None:  # type: ignore[no-untyped-def]
    flat, sites = trained["flat"][case], trained["sites"][case]
    tolerance = 1e-5 if case in EXACT else 2e-3
    assert all(math.isfinite(x) for x in sites["losses"]) and sites["losses"][-1] < sites["losses"][0]
    assert sites["losses"] == pytest.approx(flat["losses"], rel=tolerance)
    named = parameter_shapes(resolve_model(str(MODEL)))
    sync = parse(case.rpartition("@")[0])
    assert sites["bytes"] == flat["bytes"] == [payload_bytes(sync, named, step) for step in range(STEPS)]


def test_site_topk_is_exact_inside_sites_compresses_across_them_and_sends_the_predicted_bytes_per_tier(site_ranks) -> None:  # type: ignore[no-untyped-def]
    """``site_topk`` on 4 gloo ranks as two sites of 2 (ratios 1 and 0.25) and as four sites of 1 (0.25), through
    DDP's hook, and ``site_quantize`` likewise (32 and 4 bits; 8 bits on four sites of 1): at ratio 1 and at 32 bits
    every step's mean gradient is DDP's own all-reduce's within 1e-5; compressed it differs;
    each step's bytes on the site's group and on the cross-site group are the cost model's per tier
    (:meth:`plait.sync.SiteTopK.site_payload_bytes`, a 58-parameter model: inside ``4 (58 + 29)`` bytes, across
    ``8 ceil(F 29)``; one per site: ``8 ceil(F 58)``)."""
    for r in (ranks["site_topk"] for ranks in site_ranks):
        for members, sites, spec in ((2, 2, "site_topk:ratio=1"), (2, 2, "site_topk:ratio=0.25"),
                                     (1, 4, "site_topk:ratio=0.25"), (2, 2, "site_quantize:bits=32"),
                                     (2, 2, "site_quantize:bits=4"), (1, 4, "site_quantize:bits=8")):
            got = r[f"{members}:{spec}"]
            predicted = parse(spec).site_payload_bytes(58, members, sites)
            assert got["counted"] == [list(predicted)] * len(r["reference"]), spec
            close = all(g == pytest.approx(ref, rel=1e-5, abs=1e-6) for g, ref in zip(got["grads"], r["reference"]))
            assert close == spec.endswith(("ratio=1", "bits=32")), (members, spec)
        assert parse("site_topk:ratio=1").site_payload_bytes(58, 2, 2) == (4.0 * (58 + 29), 8.0 * 29)
        assert parse("site_topk:ratio=0.25").site_payload_bytes(58, 1, 4) == (0.0, 8.0 * 15)
        # site_quantize: codes of ceil(b shard / 8) bytes and a 4-byte scale across; the fp32 shard at 32 bits
        assert parse("site_quantize:bits=4").site_payload_bytes(58, 2, 2) == (4.0 * (58 + 29), 15.0 + 4.0)
        assert parse("site_quantize:bits=8").site_payload_bytes(58, 1, 4) == (0.0, 58.0 + 4.0)
        assert parse("site_quantize:bits=32").site_payload_bytes(58, 2, 2) == (4.0 * (58 + 29), 4.0 * 29)


@pytest.mark.slow
@pytest.mark.parametrize("case", PER_TIER)
def test_site_topk_at_ratio_1_trains_as_the_all_reduce_across_sites(trained, case: str) -> None:  # type: ignore[no-untyped-def]
    """``plait.run.converge`` with the two-site cluster, ``site_topk`` at ratio 1 and ``site_quantize`` at 32 bits:
    the losses of the flat all-reduce within 1e-5, every step's bytes the cost model's inside plus across (one site:
    the all-reduce's buffer)."""
    flat, sites = trained["flat"][case], trained["sites"][case]
    reference = trained["flat"]["allreduce@sgd"]
    assert sites["losses"] == pytest.approx(reference["losses"], rel=1e-5)
    assert flat["losses"] == pytest.approx(reference["losses"], rel=1e-5)
    elements = sum(math.prod(s) for _, s in parameter_shapes(resolve_model(str(MODEL))))
    sync = parse(case.rpartition("@")[0])
    assert flat["bytes"] == [4 * elements] * STEPS
    assert sites["bytes"] == [sum(sync.site_payload_bytes(elements, 2, 2))] * STEPS

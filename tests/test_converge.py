"""Steps multipliers: how they are computed from two loss curves, and `plait converge` measuring them."""

from __future__ import annotations

import contextlib
import io
import json
import math

import pytest

from plait.plan.convergence import convergence, matching_multiplier, searched_specs, table
from plait.sync import parse


def test_the_multiplier_is_where_the_reference_reaches_the_methods_final_loss() -> None:
    reference = [10.0 - i for i in range(10)]  # 10, 9, ..., 1: one unit per step
    method = [10.0 - i / 2 for i in range(10)]  # half as fast: ends at 5.5
    # window 1: step s of the reference is 11 - s, first <= 5.5 at step 6; the method ends there at step 10
    assert matching_multiplier(method, reference, 1) == (10 / 6, 6.0)
    # window 2: the method's last two average 5.75, centred at 9.5; the reference's running mean 11.5 - s reaches
    # it at s = 6, centred at 5.5
    assert matching_multiplier(method, reference, 2) == pytest.approx((9.5 / 5.5, 5.5))
    better = [x - 20 for x in reference]
    assert matching_multiplier(better, reference, 3) == (1.0, None)  # never reached: at least as good, taken as 1
    with pytest.raises(ValueError, match="window=11"):
        matching_multiplier(method, reference, 11)


def test_every_shipped_figure_states_its_basis_and_source_and_the_grid_leaves_numerical_choices_out() -> None:
    for spec, entries in table().items():
        parse(spec)  # canonical, parseable
        for entry in entries:
            assert entry.figure.basis in ("definition", "cited", "measured") and len(entry.figure.source) > 30
            assert entry.figure.multiplier is not None and entry.figure.multiplier >= 1.0
            assert entry.figure.basis != "measured" or "plait converge" in entry.figure.source
    assert convergence(parse("allreduce")).multiplier == 1.0
    grid = {s.name for s in searched_specs()}
    assert {"powersgd", "topk", "quantize", "local_sgd", "diloco"} <= grid and not grid & {"allreduce", "bf16", "fp16"}
    # local SGD measured between 2 replicas says nothing of 16
    assert convergence(parse("local_sgd:every=16"), 2).known and not convergence(parse("local_sgd:every=16"), 16).known


@pytest.mark.slow
def test_plait_converge_measures_lossy_methods_within_their_shipped_multipliers() -> None:
    """60 steps of 1-bit quantization and 1% top-k against the all-reduce (2 ranks, gloo): both train (finite,
    falling losses), both need more steps than the all-reduce, and no more than the 300-step figure plait ships
    for them says (the shipped multiplier bounds a shorter run's)."""
    pytest.importorskip("torch")
    from plait.cli.main import run_cli

    specs = ("quantize:bits=1", "topk:ratio=0.01")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert run_cli(["converge", "--steps", "60", "--json", *(a for s in specs for a in ("--dp-sync", s))]) == 0
    rows = {r["dp_sync"]: r for r in json.loads(out.getvalue())["results"]}
    for spec in specs:
        row = rows[parse(spec).spec]
        assert math.isfinite(row["final_loss"]) and row["final_loss"] < row["initial_loss"]
        assert row["final_loss"] > row["allreduce_final_loss"] and row["multiplier"] > 1.0
        assert row["multiplier"] <= convergence(parse(spec)).factor
        assert row["bytes_per_step"] < row["allreduce_bytes_per_step"] / 10

"""Pruning before the cross product (plait.search.factored): the candidates that break no rule, in order, and the
count of every rule are those of enumerating every candidate and checking each rule on every row."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import plait.search.factored as factored
from plait.engine.capability import unsupported_index
from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.plan.columns import FIELDS
from plait.plan.convergence import searched_specs
from plait.search.enumerate import enumerate_space
from plait.search.rules import ENGINE_CODE, SEARCH_RULES, PruneRule, prune
from plait.search.space import default_space, for_engine
from plait.sync import ALLREDUCE
from plait.workload.catalog import get_model

CLUSTER = get_cluster("dgx-h100-ib")


def _every_row(model, space, engine):  # type: ignore[no-untyped-def]
    """The reference: every candidate built, every rule checked on every row."""
    cols = enumerate_space(model, space)
    verdict = prune(cols, model, CLUSTER, space)
    refused = unsupported_index(cols, model, engine)
    verdict = np.where((verdict < 0) & (refused >= 0), ENGINE_CODE + refused, verdict)
    codes, counts = np.unique(verdict[verdict >= 0], return_counts=True)
    return cols.take(np.flatnonzero(verdict < 0)), dict(zip(codes.tolist(), counts.tolist())), len(cols)


@pytest.mark.parametrize(("model", "gpus", "engine", "group_rows"), [
    ("llama3-8b", 32, None, factored.GROUP_ROWS),  # every synchronization method and parameter servers
    ("llama3-8b", 32, None, 2000),  # layouts checked in many runs: groups joined in a later run
    ("mixtral-8x7b", 16, "megatron-core", factored.GROUP_ROWS),  # experts and an engine's refusals
    ("gpt3-1.3b", 16, "deepspeed", 5000),
])
def test_survivors_and_counts_equal_checking_every_row(model: str, gpus: int, engine: str | None, group_rows: int,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(factored, "GROUP_ROWS", group_rows)
    spec, runs = get_model(model), get_engine(engine) if engine else get_engine()
    space = for_engine(default_space(spec, CLUSTER, gpus, (128,), dp_syncs=(ALLREDUCE, *searched_specs()),
                                     param_servers=True), runs)
    expected, counts, total = _every_row(spec, space, runs)
    learned: dict[int, frozenset[int]] = {}
    factored.pruned(spec, CLUSTER, space, runs, learned)  # the lists each rule read, a hint for the next search
    assert learned
    # no hint; the hint learned; one grouping every list with rule 0's (larger groups than the rules need)
    for reads in (None, learned, {0: frozenset(range(len(FIELDS)))}):
        kept, found, enumerated = factored.pruned(spec, CLUSTER, space, runs, reads)
        assert enumerated == total and found == counts and 0 < len(kept) < total
        for name in FIELDS:
            assert kept[name].dtype == expected[name].dtype and np.array_equal(kept[name], expected[name]), name


def test_a_rule_reading_lists_no_other_rule_joins(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule that reads the micro-batch and precision lists together (no shipped rule does) joins their groups,
    and its verdicts stay exact; a rule reading a list only on some rows is seen to read it there."""
    spec, runs = get_model("llama3-8b"), get_engine()
    odd = PruneRule("toy", "toy: fp8 with micro-batch 2",
                    lambda c, m, k, s: c.is_("precision", "fp8") & (c["micro_batch"] == 2))
    late = PruneRule("toy-late", "toy: recompute read only where tp > 2",
                     lambda c, m, k, s: (c["tp"] > 2) & c.is_("recompute", "full") if (c["tp"] > 2).any()
                     else np.zeros(len(c), dtype=bool))
    monkeypatch.setattr("plait.search.rules.SEARCH_RULES", (*SEARCH_RULES, odd, late))
    monkeypatch.setattr(factored, "SEARCH_RULES", (*SEARCH_RULES, odd, late))
    monkeypatch.setattr(factored, "GROUP_ROWS", 2000)  # the late read first seen in a later run of layouts
    space = replace(default_space(spec, CLUSTER, 32, (128,)), swap_activations=False)
    expected, counts, total = _every_row(spec, space, runs)
    kept, found, enumerated = factored.pruned(spec, CLUSTER, space, runs)
    assert found == counts and enumerated == total
    assert all(np.array_equal(kept[name], expected[name]) for name in FIELDS)

"""A search (which prunes before the cross product, plait.search.factored) reaches the verdicts of pruning the whole
space at once, and its memory screen keeps what timing every row keeps."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plait.engine.capability import reasons as engine_reasons
from plait.engine.capability import unsupported_index
from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.plan.columns import FIELDS
from plait.plan.convergence import searched_specs
from plait.search.enumerate import enumerate_space
from plait.search.parts import _smallest, search_part
from plait.search.rules import ENGINE_CODE, MEMORY_CODE, prune, reason_table
from plait.search.space import default_space
from plait.sync import ALLREDUCE
from plait.workload.catalog import get_model

MODEL, CLUSTER = get_model("llama3-8b"), get_cluster("dgx-h100-ib")
SPACE = replace(default_space(MODEL, CLUSTER, 64, (256,), dp_syncs=(ALLREDUCE, *searched_specs()), param_servers=True),
                swap_activations=False)  # the enumerated space only: swapping twins are made during a search


def test_verdicts_equal_the_whole_space_pruned_at_once() -> None:
    engine = get_engine()
    cols = enumerate_space(MODEL, SPACE)
    verdict = prune(cols, MODEL, CLUSTER, SPACE)
    refused = unsupported_index(cols, MODEL, engine)
    verdict = np.where((verdict < 0) & (refused >= 0), ENGINE_CODE + refused, verdict)
    names = reason_table() + engine_reasons(engine)
    expected = Counter({names[c]: int(n) for c, n in zip(*np.unique(verdict[verdict >= 0], return_counts=True))})
    part = search_part(MODEL, CLUSTER, SPACE, engine)
    memory = part.reasons.pop(names[MEMORY_CODE], 0)
    assert part.reasons == expected
    assert part.costed == int((verdict < 0).sum()) and part.num_candidates == len(cols)
    assert memory + sum(len(rows) for _, rows in part.chunks) == part.costed  # each costed row fits or does not


@pytest.mark.parametrize(("model", "gpus", "batch", "chunk"), [("llama3-70b", 64, 256, 65536),
                                                                ("llama3-8b", 16, 64, 65536),
                                                                ("llama3-70b", 64, 256, 3000)])
def test_memory_screen_keeps_what_timing_every_row_keeps(model: str, gpus: int, batch: int, chunk: int,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows that cannot fit are not timed (search.parts.screened), and later chunks reuse the per-layer quantities
    of earlier ones; the kept rows, their figures to the last bit and the verdict counts are those of timing every
    costed row of every chunk from scratch."""
    import plait.search.parts as parts

    monkeypatch.setattr(parts, "CHUNK", chunk)
    spec, engine = get_model(model), get_engine()
    space = default_space(spec, CLUSTER, gpus, (batch,), dp_syncs=(ALLREDUCE, *searched_specs()), param_servers=True)
    screened = search_part(spec, CLUSTER, space, engine)
    monkeypatch.setattr(parts, "screened", lambda *args: None)
    timed = search_part(spec, CLUSTER, space, engine)
    assert screened.reasons == timed.reasons and screened.costed == timed.costed
    assert len(screened.chunks) == len(timed.chunks)
    misses = 0
    for (a, rows_a), (b, rows_b) in zip(screened.chunks, timed.chunks, strict=True):
        assert np.array_equal(rows_a, rows_b)
        for name in FIELDS:
            assert np.array_equal(a.cols[name], b.cols[name]), name
        for table_a, table_b in ((a.time, b.time), (a.memory, b.memory)):
            assert table_a.keys() == table_b.keys()
            assert all(np.array_equal(table_a[k], table_b[k]) for k in table_a)
        misses += len(a.cols) - len(rows_a)
    assert misses > 0 and screened.reasons[reason_table()[MEMORY_CODE]] > misses, "the case should screen rows out"
    assert chunk > screened.costed or len(screened.chunks) > 1


@given(st.lists(st.sampled_from([0.0, 1.0, 2.5, 3.0, float("inf"), float("nan")]), max_size=40),
       st.integers(min_value=1, max_value=20))
def test_smallest_is_the_head_of_a_stable_argsort(values: list[float], k: int) -> None:
    """The nearest misses are found by a partition, then a sort of the few below it: the same rows in the same
    order as sorting every row (ties in position order, NaN last)."""
    array = np.array(values, dtype=np.float64)
    assert np.array_equal(_smallest(array, k), np.argsort(array, kind="stable")[:k])

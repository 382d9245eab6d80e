"""The bounded memo estimates share (plait.kept)."""

from __future__ import annotations

from plait.kept import MISSING, TABLES, Kept, empty_all


def test_the_oldest_goes_first_and_each_entry_holds_its_objects() -> None:
    table: Kept[int] = Kept(2)
    held = object()
    assert table.find(("a",)) is MISSING
    assert table.keep(("a",), (held,), 1) == 1
    table.keep(("b",), (), 2)
    table.keep(("c",), (), 3)  # full at 2: "a", the oldest, goes
    assert (table.find(("a",)), table.find(("b",)), table.find(("c",)), len(table)) == (MISSING, 2, 3, 2)
    assert table in TABLES
    empty_all()
    assert len(table) == 0 and table.find(("b",)) is MISSING


def test_get_computes_once_per_key() -> None:
    table: Kept[int] = Kept(4)
    calls = []
    for _ in range(3):
        assert table.get(("k",), (), lambda: calls.append(1) or 7) == 7
    assert calls == [1]


def test_a_table_of_catalog_listings_stays_through_empty_all() -> None:
    """An engine's listing is derived from the engine alone (plait.engine.capability): emptying the per-estimate
    tables leaves it."""
    table: Kept[int] = Kept(2, per_estimate=False)
    table.keep(("engine",), (), 5)
    empty_all()
    assert table not in TABLES and table.find(("engine",)) == 5

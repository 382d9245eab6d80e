"""Sizes printed in the unit that fits (``plait.units.format_bytes``), each expected text worked out by hand."""

from __future__ import annotations

import pytest

from plait.units import format_bytes


@pytest.mark.parametrize(("num_bytes", "text"), [
    (0, "0 B"), (512, "512 B"), (1023, "1023 B"), (1024, "1.00 KiB"),
    (10**6, "977 KiB"),  # 10^6 / 1024 = 976.56
    (3 * 2**20 // 2, "1.50 MiB"), (40 * 2**30, "40.0 GiB"), (123 * 2**30, "123 GiB"),
    (1023.9 * 2**30, "1.00 TiB"),  # 1023.9 GiB would round to "1024 GiB"
    (9.999 * 2**20, "10.0 MiB"),  # three significant figures, not "10.00"
    (-2048, "-2.00 KiB"),
])
def test_sizes_print_in_the_unit_that_fits(num_bytes: float, text: str) -> None:
    assert format_bytes(num_bytes) == text

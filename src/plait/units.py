"""Units and dtype sizes: the one home of every conversion constant (STYLE.md rule 5: units in names)."""

from __future__ import annotations

GIB = 1024**3
"""Bytes in a gibibyte (memory capacities and breakdowns)."""
GB = 1e9
"""Bytes in a gigabyte (bandwidths, quoted in GB/s by datasheets)."""
MIB = 1024**2
"""Bytes in a mebibyte (PyTorch's bucket caps, ``bucket_cap_mb``, count these)."""
S_PER_US = 1e-6
"""Seconds in a microsecond."""
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
"""Bytes per element of each dtype."""

_BINARY_PREFIXES = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def format_bytes(num_bytes: float) -> str:
    """``num_bytes`` in the largest binary unit that keeps it at least 1, to three significant figures ("512 B",
    "977 KiB", "2.07 MiB", "40.0 GiB"); a non-finite count as itself."""
    if num_bytes != num_bytes or num_bytes in (float("inf"), float("-inf")):
        return f"{num_bytes} B"
    value, unit = abs(float(num_bytes)), 0
    while value >= 1023.5 and unit < len(_BINARY_PREFIXES) - 1:  # 1023.5 would print as 1024 of this unit
        value, unit = value / 1024, unit + 1
    sign = "-" if num_bytes < 0 else ""
    if unit == 0:
        return f"{sign}{value:.0f} B"
    digits = 2 if value < 10 else 1 if value < 100 else 0
    text = f"{value:.{digits}f}"
    if text in ("10.00", "100.0"):  # rounding reached the next decade: keep three significant figures
        text = f"{value:.{digits - 1}f}"
    return f"{sign}{text} {_BINARY_PREFIXES[unit]}"

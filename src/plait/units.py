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

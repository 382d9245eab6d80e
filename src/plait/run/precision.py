"""The matmul precision a CPU runs natively, so that ``plait run`` and ``plait calibrate`` use it.

PyTorch's CPU bf16/fp16 matmuls go through oneDNN, which runs them in hardware only with the matching
instructions — AVX512-BF16 or AMX-BF16 for bf16, AVX512-FP16 or AMX-FP16 for fp16 on x86, the BF16 extension
(ARMv8.6) for bf16 on Arm — and otherwise emulates them by converting to fp32
(https://uxlfoundation.github.io/oneDNN/dev_guide_data_types.html, "Hardware Limitations"). Emulated bf16
is not a cheaper bf16, it is much slower fp32: on an AVX2-only CPU a bf16 matmul ran at 0.8 GFLOP/s against
110 GFLOP/s in fp32. The flags are the Linux kernel's names in ``/proc/cpuinfo``.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

NATIVE_FLAGS = {"bf16": ("avx512_bf16", "amx_bf16", "bf16"), "fp16": ("avx512_fp16", "amx_fp16", "fphp")}
"""Per precision: /proc/cpuinfo ``flags`` (x86) or ``Features`` (Arm) words, any of which means native."""


@cache
def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:  # not Linux: nothing is known to be native
        return ""


def cpu_runs_natively(precision: str, cpuinfo: str | None = None) -> bool:
    """Whether this CPU (or the given ``/proc/cpuinfo`` text) computes ``precision`` matmuls in hardware;
    fp32 always, fp8 never (torchao's float8 on a CPU is emulated by design and kept as asked)."""
    if precision in ("fp32", "fp8"):
        return True
    text = _cpuinfo() if cpuinfo is None else cpuinfo
    words = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            words.update(value.split())
    return any(flag in words for flag in NATIVE_FLAGS.get(precision, ()))


def cpu_fallback_note(precision: str, cpuinfo: str | None = None) -> str | None:
    """What ``plait run`` says when it trains a ``precision`` plan in fp32 on this CPU (``None``: native)."""
    if cpu_runs_natively(precision, cpuinfo):
        return None
    flags = " or ".join(NATIVE_FLAGS[precision][:2])
    return (f"this CPU has no native {precision} matmul ({flags}); training in fp32, since emulated {precision} "
            f"is much slower fp32 (--full-precision is implied)")

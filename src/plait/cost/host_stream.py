"""The host stream of a step: the CPU thread that issues every kernel the device runs.

A step runs three streams at once: the device executing kernels, the host thread issuing them (framework dispatch,
autograd, the CUDA launch call: 5-20 us per kernel from an eager PyTorch program, Meta's HolisticTraceAnalysis docs,
``docs/source/features/cuda_kernel_launch_stats.rst``, kept as each accelerator's ``host_launch_us``), and the input
pipeline's loader workers on other host cores (:mod:`plait.cost.input_pipeline`). The host issues asynchronously, so
it runs ahead of the device and its time hides unless it is the longer of the two; the loader prefetches, so it hides
unless it is longer still. The step therefore lasts ``max(device, host, loader)`` (a step composed of concurrent
producer and consumer streams lasts as long as its slowest stream), and the waits below are what each slower stream
adds to the device's time, so that a time breakdown still sums to the step.
"""

from __future__ import annotations


def host_issue_s(num_kernels: float, host_launch_s: float) -> float:
    """Seconds the host needs to issue ``num_kernels`` kernels at ``host_launch_s`` each (module docstring)."""
    return num_kernels * host_launch_s


def stream_waits_s(device_s: float, host_s: float, loader_s: float) -> tuple[float, float]:
    """(host wait, input wait): the seconds the host stream and then the loader add to a step whose device work takes
    ``device_s``; their sum is ``max(device, host, loader) - device``."""
    host_wait = max(0.0, host_s - device_s)
    return host_wait, max(0.0, loader_s - max(device_s, host_s))

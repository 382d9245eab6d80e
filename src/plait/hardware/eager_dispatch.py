"""The host's framework time per eager PyTorch op, beside the CUDA launch call it ends in.

An eager op costs the host more than its ``cudaLaunchKernel``. The accelerator's ``host_launch_us`` is that launch
call alone: its source, Meta's HolisticTraceAnalysis (docs/source/features/cuda_kernel_launch_stats.rst @0c2146a8),
times "the duration of the CPU runtime event" (``cudaLaunchKernel``, ``cudaMemcpyAsync``) linked to each kernel by
its correlation id, and says "the launch time on the CPU side is between 5-20 microseconds". Before that call an
eager op runs the Python of the model's forward code (module calls, attention processors, rotary embedding) and
PyTorch's dispatch of the op (argument parsing, the dispatcher, TensorIterator, the output's allocation): this
figure. ``torch.compile``'s generated wrapper calls its kernels without either (Ansel et al., PyTorch 2, ASPLOS 2024,
Sec. 4), and a CUDA graph replays its kernels with one launch (CUDA Programming Guide, "CUDA Graphs"), so neither
pays it. Which engines run eager ops is an engine fact (:attr:`plait.engine.facts.EngineFacts.eager_dispatch`);
the time is a host figure (:attr:`plait.hardware.accelerator.Efficiency.eager_dispatch_us`: this one on the packaged
accelerators; 0 on a description that does not state it, whose ``host_launch_us`` is read as the whole per-op time,
as ``plait calibrate`` times it).
"""

from __future__ import annotations

from plait.hardware.figure import Figure

EAGER_DISPATCH_US = Figure(
    value=13.3,
    source="measured by python benchmarks/dit_eager_host.py on 2026-12-06 (diffusers 0.31.0, torch 2.13 CPU build, "
           "bf16, one thread, this repository's 2-core Xeon host at load average 6.7-10.9): the CPU time of FLUX.1's "
           "double- and single-stream blocks' eager forward on one-token tensors over the 144 ops they dispatch, "
           "12.6-17.6 us per op in 7 runs, median 13.3 (CPU time grows with the load); it includes the "
           "one-element CPU kernels (a bare x + 1 is 2.5 us) and not a GPU op's allocator and stream guards; "
           "the host CPU of the measured GPUs is not stated by their sources")
"""Host time per eager op before its launch call (module docstring)."""

CALIBRATED_DISPATCH = ("0: plait calibrate times whole eager ops of a training step, the framework's dispatch "
                       "included, into host_launch_us (plait.run.calibrate_compute.dispatch_us)")
"""Source of the zero dispatch figure a calibrated description carries (its launch figure holds the dispatch)."""

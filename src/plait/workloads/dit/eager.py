"""The host's framework time per op of an eager PyTorch DiT step, beside the CUDA launch call it ends in.

An eager op costs the host more than its ``cudaLaunchKernel`` (the accelerator's ``host_launch_us``, the launch
call alone in Meta's HolisticTraceAnalysis): before it runs the Python of the model's forward code (module calls,
diffusers' attention processor, the rotary embedding) and PyTorch's dispatch of the op (argument parsing, the
dispatcher, TensorIterator, the output's allocation). ``torch.compile``'s generated wrapper calls its kernels
without either (Ansel et al., PyTorch 2, ASPLOS 2024, Sec. 4), so a compiled step pays the launches only.
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

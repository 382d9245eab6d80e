"""``tp_comm_overlap = true`` as PyTorch's asynchronous (micro-pipelined) tensor parallelism.

Inductor's micro-pipeline TP pass (``torch._inductor.config._micro_pipeline_tp``,
torch/_inductor/fx_passes/micro_pipeline_tp.py) rewrites the sequence-parallel all-gather -> matmul and
matmul -> reduce-scatter pairs of a compiled graph into fused, chunked ops over CUDA symmetric memory, so
each chunk's transfer hides behind the previous chunk's GEMM (Wang et al. 2022, "Overlap Communication
with Dependent Computation via Decomposition"). The steps follow torchtitan
(torchtitan/distributed/compile.py ``apply_compile`` and ``_maybe_enable_async_tp``): register the TP
group for symmetric memory, switch the pass on, and compile each transformer block after TP and activation
checkpointing and before FSDP. CUDA only: symmetric memory needs GPU peer access.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from plait.run.mesh import Mesh


def enable_async_tp(mesh: Mesh) -> None:
    """Register the TP group for symmetric memory and switch on Inductor's micro-pipeline TP pass."""
    import torch._inductor.config
    from torch.distributed._symmetric_memory import enable_symm_mem_for_group

    with warnings.catch_warnings():
        # deprecated in PyTorch 2.13 but still needed for async TP (pytorch/pytorch#193027, as torchtitan notes)
        warnings.simplefilter("ignore", FutureWarning)
        enable_symm_mem_for_group(mesh.sub("tp").get_group().group_name)
    torch._inductor.config._micro_pipeline_tp = True


def compile_blocks(model: nn.Module, backend: str = "inductor") -> int:
    """``torch.compile`` each transformer block in place (torchtitan ``apply_compile``: the repeated block
    compiles once; ``fullgraph`` so the collectives and their GEMMs land in one graph). Returns the count."""
    layers = model.layers  # type: ignore[union-attr]
    assert isinstance(layers, nn.ModuleDict)
    for block in layers.values():
        # Full recompute: compile inside the checkpoint wrapper, which stays eager. Compiling the wrapper, as
        # torchtitan does, fails in PyTorch 2.13 once DTensor is involved (AOT autograd: "expected all
        # tensors_saved_with_vc_check to be Tensors", a DeviceMesh among them).
        inner = getattr(block, "_checkpoint_wrapped_module", block)
        inner.compile(backend=backend, fullgraph=True)
    return len(layers)


def _materialize(module: nn.Module, args: object, output: torch.Tensor) -> torch.Tensor:
    # The embedding's sequence-parallel reduce-scatter returns an AsyncCollectiveTensor; fed as is into a
    # compiled block, the block's backward hands DTensor's Redistribute a plain tensor and fails
    # ("'Tensor' object has no attribute '_local_tensor'", PyTorch 2.13, eager/aot_eager/inductor alike;
    # the bug class of pytorch/pytorch#180614). A copy waits for it and is an ordinary autograd input.
    return output.clone()


def wait_before_blocks(model: nn.Module) -> None:
    """Hand the first compiled block a plain tensor (see :func:`_materialize`); no-op off the first stage."""
    embeddings = getattr(model, "tok_embeddings", None)
    if embeddings is not None:
        embeddings.register_forward_hook(_materialize)  # after TP's own output hook


def apply_async_tp(model: nn.Module, mesh: Mesh) -> None:
    """Async TP for one model part: after ``apply_tp`` and recompute, before data parallelism."""
    enable_async_tp(mesh)
    wait_before_blocks(model)
    compile_blocks(model)

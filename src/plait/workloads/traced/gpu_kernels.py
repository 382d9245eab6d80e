"""Three functions traced as a GPU runs them, where the meta device would run PyTorch's reference decomposition
(:func:`gpu_kernels_mode`); the tracer (:mod:`plait.workloads.traced.recorder`) records under it."""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def gpu_kernels_mode() -> Any:
    """The ``TorchFunctionMode`` class that substitutes the GPU's kernels (its docstring); defined on first use, so
    that importing plait does not import torch."""
    import torch

    rms_norm = _fused_rms_norm()

    class GpuKernels(torch.overrides.TorchFunctionMode):
        """Three functions as a GPU runs them, where the meta device runs PyTorch's reference decomposition:
        ``scaled_dot_product_attention`` is FlashAttention-2 on CUDA (``_scaled_dot_product_flash_attention``,
        which saves its output and the log-sum-exp per query; the math path saves the whole score matrix);
        ``dropout`` in training is one fused kernel (``native_dropout``, which writes the output and a boolean
        mask, its backward ``native_dropout_backward`` reading the gradient and the mask: ATen's ``dropout`` takes
        it for CUDA tensors, ``is_fused_kernel_acceptable`` in aten/src/ATen/native/Dropout.cpp, where other
        devices draw a Bernoulli tensor, scale it and multiply); and ``rms_norm`` is one fused kernel
        (``_fused_rms_norm``, whose backward ``_fused_rms_norm_backward`` reads the input and the fp32 reciprocal
        RMS per row; the decomposition saves fp32 copies). Attention with a mask or
        grouped heads (``enable_gqa``) keeps PyTorch's own choice."""

        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            if func is torch.nn.functional.scaled_dot_product_attention:
                flash = _flash_call(args, kwargs)
                if flash is not None:
                    return flash
            if func is torch.nn.functional.dropout:
                fused = _fused_dropout(args, kwargs)
                if fused is not None:
                    return fused
            if func is torch.nn.functional.rms_norm:
                names = ("input", "normalized_shape", "weight", "eps")
                given = {**dict(zip(names, args)), **kwargs}
                return rms_norm.apply(given["input"], given.get("weight"), len(given["normalized_shape"]))
            return func(*args, **kwargs)

    return GpuKernels


def _fused_rms_norm() -> Any:
    import torch

    class FusedRMSNorm(torch.autograd.Function):
        """What the fused RMSNorm kernel saves and moves (:func:`gpu_kernels_mode`): forward reads the input
        and the weight and writes the output (one multiply stands for it on the meta device); backward reads the
        output gradient, the input and the weight and writes the input and weight gradients."""

        @staticmethod
        def forward(ctx, x, weight, dims):  # type: ignore[no-untyped-def]
            rstd = x.new_empty((*x.shape[: x.dim() - dims], *([1] * dims)), dtype=torch.float32)
            ctx.save_for_backward(x, weight, rstd)
            ctx.dims = dims
            return torch.mul(x, weight) if weight is not None else x.clone()

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            x, weight, _ = ctx.saved_tensors
            dx = torch.mul(grad, weight) if weight is not None else grad.clone()
            dw = torch.mul(grad, x).sum(dim=tuple(range(x.dim() - ctx.dims))) if weight is not None else None
            return dx, dw, None

    return FusedRMSNorm


def _fused_dropout(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The output of ``dropout`` as CUDA runs it in training (``native_dropout``), or ``None`` where ATen runs no
    kernel or another one (not training, ``p`` of 0 or 1, in place)."""
    import torch

    names = ("input", "p", "training", "inplace")
    given = {"p": 0.5, "training": True, "inplace": False, **dict(zip(names, args)), **kwargs}
    if not given["training"] or given["inplace"] or not 0.0 < float(given["p"]) < 1.0:
        return None
    return torch.native_dropout(given["input"], float(given["p"]), True)[0]


def _flash_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """FlashAttention's output for an unmasked ``scaled_dot_product_attention`` call of equal head counts, or
    ``None`` for calls it does not cover."""
    import torch

    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    given = {**dict(zip(names, args)), **kwargs}
    q, k, v = given["query"], given["key"], given["value"]
    if given.get("attn_mask") is not None or given.get("enable_gqa") or q.shape[-3] != k.shape[-3]:
        return None
    return torch.ops.aten._scaled_dot_product_flash_attention(
        q, k, v, float(given.get("dropout_p", 0.0)), bool(given.get("is_causal", False)),
        scale=given.get("scale"))[0]



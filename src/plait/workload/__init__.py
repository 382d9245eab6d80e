"""Model descriptions: dense and MoE decoder-only transformers, catalog, HF config loading."""

from plait.workload.model import MlaSpec, ModelSpec, MoeSpec

__all__ = ["MlaSpec", "ModelSpec", "MoeSpec"]

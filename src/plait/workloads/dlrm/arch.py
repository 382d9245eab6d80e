"""The runtime model of a ``cat`` DLRM and of Wide & Deep, from TorchRec's parts (TorchRec's ``DLRM`` has only the
``dot`` interaction and one width for every table: ``torchrec.models.dlrm.SparseArch`` reshapes to ``B x F x D``).

- The sparse arch: TorchRec's ``EmbeddingBagCollection``, each feature's pooled rows at its own width (its
  ``KeyedTensor`` as a dict), at the path :data:`plait.workloads.dlrm.worker.SPARSE_PATH` that the sharding plan names.
- The dense arch: TorchRec's ``DenseArch`` (ReLU MLP) over the dense features, or the features as they are when
  ``bottom_mlp`` is empty (Wide & Deep's deep part takes them so: Cheng et al., arXiv 1606.07792, Sec. 3.2).
- The interaction: the dense output and the deep tables' pooled embeddings concatenated (DLRM's
  ``--arch-interaction-op=cat``: facebookresearch/dlrm dlrm_s_pytorch.py ``interact_features``,
  ``R = torch.cat([x] + ly, dim=1)``), through TorchRec's ``OverArch`` (ReLU MLP, last layer linear).
- Wide & Deep: the wide tables' pooled weights (one per id, summed: ``w^T x`` over the crossed features' one-hot
  vector, Sec. 3.1) added to the deep logit (joint training, Sec. 3.3, Eq. 3; the deep last layer's bias is the
  model's bias ``b``).

Legend: ``B`` samples, ``I`` the over arch's input (:meth:`plait.workloads.dlrm.model.DlrmSpec.interaction_width`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from plait.workloads.dlrm.model import DlrmSpec


class PooledSparseArch(nn.Module):
    """The embedding collection; its forward gives each feature's pooled rows, ``B x dim`` at the table's width."""

    def __init__(self, embedding_bag_collection: nn.Module) -> None:
        super().__init__()
        self.embedding_bag_collection = embedding_bag_collection

    def forward(self, features: Any) -> dict[str, torch.Tensor]:
        return self.embedding_bag_collection(features).to_dict()


class ConcatRecModel(nn.Module):
    """A ``cat`` DLRM, and with wide tables Wide & Deep (module docstring); called as TorchRec's ``DLRM`` is,
    ``(dense_features, sparse_features) -> logits B x 1``, so ``DLRMTrain`` wraps it."""

    def __init__(self, spec: DlrmSpec, embedding_bag_collection: nn.Module, device: torch.device) -> None:
        from torchrec.models.dlrm import DenseArch, OverArch

        super().__init__()
        self.sparse_arch = PooledSparseArch(embedding_bag_collection)
        self.dense_arch = (DenseArch(spec.dense_features, list(spec.bottom_mlp), device) if spec.bottom_mlp
                           else nn.Identity())
        width = spec.interaction_width()
        self.over_arch = (OverArch(width, list(spec.top_mlp), device) if len(spec.top_mlp) > 1
                          else nn.Linear(width, 1, device=device))  # OverArch refuses a single layer
        self.deep = [f"{t.name}_ids" for t in spec.deep_tables]
        self.wide = [f"{t.name}_ids" for t in spec.tables if t.part == "wide"]

    def forward(self, dense_features: torch.Tensor, sparse_features: Any) -> torch.Tensor:
        pooled = self.sparse_arch(sparse_features)
        x_BI = torch.cat([self.dense_arch(dense_features), *(pooled[k] for k in self.deep)], dim=1)
        logits_B1 = self.over_arch(x_BI)
        for k in self.wide:
            logits_B1 = logits_B1 + pooled[k]
        return logits_B1

"""An optimizer step counted pass by pass: the bytes per parameter its multi-tensor kernels read and write.

plait's default optimizer step (:func:`plait.cost.dataparallel.optimizer_step_s`) reads the gradient and reads and
writes the optimizer state once: Adam's single fused pass. LAMB (You et al., "Large Batch Optimization for Deep
Learning: Training BERT in 76 minutes", ICLR 2020, Algorithm 2) needs more: the global gradient norm before the
update (for clipping), then Adam's moments and the update, then the norms of each weight and of its update (the
trust ratio), then the weight's step. Each is a separate sweep over every parameter in the multi-tensor kernels
DeepLearningExamples' BERT runs, so the step moves the bytes counted here, at the sustained memory bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass

from plait.cost.compute import memory_bytes_per_s
from plait.hardware.cluster import Cluster


@dataclass(frozen=True, kw_only=True)
class OptimizerPasses:
    """The device bytes per parameter of one optimizer step (module docstring)."""

    bytes_per_param: float
    """Bytes read and written per parameter over all the step's kernels."""
    source: str
    """The kernels counted, with the code they are read from."""

    def step_s(self, cluster: Cluster, num_params: float) -> float:
        """Seconds of the step over ``num_params`` parameters on one rank."""
        return self.bytes_per_param * num_params / memory_bytes_per_s(cluster.accelerator)


BERT_LAMB_1907_AMP = OptimizerPasses(
    bytes_per_param=4 + 4 + (16 + 12) + 4 + (8 + 4) + (4 + 2),
    source="DeepLearningExamples BERT optimization.py @6fe463f BertLAMB.apply_gradients on apex amp O2's fp32 master "
    "weights and gradients: multi_tensor_l2norm of the gradients (read 4) and of the weights (read 4); "
    "lamb_compute_update (read g, p, m, v; write m, v, update); multi_tensor_l2norm of the update (read 4); "
    "lamb_apply_update (read p, update; write p); then amp's master-to-model copy (read 4, write 2)",
)
"""pytorch:19.07's BERT LAMB step in mixed precision: 58 bytes per parameter."""
BERT_LAMB_1907_FP32 = OptimizerPasses(
    bytes_per_param=4 + 4 + (16 + 12) + 4 + (8 + 4),
    source="DeepLearningExamples BERT optimization.py @6fe463f BertLAMB.apply_gradients on fp32 weights: the "
    "passes of BERT_LAMB_1907_AMP without amp's master-to-model copy",
)
"""pytorch:19.07's BERT LAMB step in FP32: 52 bytes per parameter."""
BERT_LAMB_2111_AMP = OptimizerPasses(
    bytes_per_param=(2 + 2) + 2 + 4 + (2 + 12 + 2 + 8) + 2 + (4 + 2 + 4 + 2),
    source="DeepLearningExamples BERT lamb_amp_opt @a9e2c1d5 (FusedLAMBAMP.step, csrc/multi_tensor_lamb.cu) on fp16 "
    "gradients and fp32 master weights: GradScaler's overflow check (fused_lamb.py line 149 calls "
    "grad_scaler._check_inf_per_device, which runs torch._amp_foreach_non_finite_check_and_unscale_ at inverse "
    "scale 1 over every gradient in place: read 2, write 2); multi_tensor_l2norm of the gradients (read 2), of "
    "the master weights (read 4); LAMBStage1Functor (read g 2, p, m, v 12; write the update into g 2, m, v 8); the "
    "update's norm (read 2); LAMBStage2Functor (read p 4, update 2; write p 4 and the fp16 model copy 2)",
)
"""pytorch:21.11's BERT LAMB step in mixed precision: 48 bytes per parameter. ``GradScaler`` runs only with
``--fp16`` (run_pretraining.py @a9e2c1d5 line 425, ``enabled=args.fp16``), so the TF32 step has no overflow check."""
BERT_LAMB_2111_TF32 = OptimizerPasses(
    bytes_per_param=4 + 4 + (4 + 12 + 4 + 8) + 4 + (4 + 4 + 4),
    source="DeepLearningExamples BERT lamb_amp_opt @a9e2c1d5 (FusedLAMBAMP.step, csrc/multi_tensor_lamb.cu) on fp32 "
    "gradients and weights: the passes of BERT_LAMB_2111_AMP with 4-byte gradients, no fp16 copy and no overflow "
    "check (GradScaler disabled without --fp16)",
)
"""pytorch:21.11's BERT LAMB step in TF32: 52 bytes per parameter."""

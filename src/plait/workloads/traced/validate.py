"""Predicted vs measured throughput of classic data-parallel training: ResNet-50 and BERT-large runs
published by NVIDIA DeepLearningExamples and the TensorFlow benchmarks page (``plait/validate/data/classic_dp.csv``; every
source, commit and caveat in ``plait/validate/data/classic_dp.md``), each traced (:mod:`.tracing`) and costed
(:mod:`.cost`) as data parallelism on the system it ran on.

A row's plan: ``batch_per_gpu`` examples per micro-batch, the accumulation steps its notes state (BERT; ResNet-50
takes one), one replica per GPU, unsharded, all-reduce; SGD with momentum for ResNet-50, LAMB (Adam's state) for
BERT; mixed precision as fp16, TF32 and FP32 runs as plans of those precisions (traced in float32). Each row's
input pipeline is the loader its source ran (:func:`row_loader`), on the host cores of its preset; phase-2 BERT runs
that padded mini-batches only to their longest sequence are traced at their mean padded length (:data:`BINNED_PHASE2`);
BERT runs trace attention as their source ran it (:data:`UNFUSED_ATTENTION`); MXNet's float16 runs fuse batch
normalization with the ReLU and residual add after it (:data:`FUSE_BN_RELU`), DeepLearningExamples' BERT runs
reduce in one flat all-reduce after the last micro-batch (:data:`FLAT_REDUCE`) and step LAMB pass by pass
(:data:`LAMB`), and its TensorFlow and MXNet runs reduce in Horovod's fused batches once per cycle (:data:`HOROVOD`).
The error is on the step time (the global batch over the throughput), as ``plait validate --runs``. Rows plait cannot
predict say why: GPUs without a preset system, tables that state no batch or no accumulation steps.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from plait.cost.host import EagerOptimizer
from plait.cost.input_pipeline import Loader, get_loader
from plait.engine.catalog import get_engine
from plait.engine.engine import Engine
from plait.errors import ConfigError, require_extra
from plait.plan.plan import Plan
from plait.predict.intervals import step_interval_s
from plait.validate.classic import ClassicResult
from plait.validate.progress import Progress, each
from plait.validate.records import Record, plain, read_records
from plait.validate.systems import PRECISIONS, gpu_label, row_cluster, unpredicted, with_precision_named
from plait.workloads.traced.cost import TracedRunFacts, estimate_traced
from plait.workloads.traced.flat_reduce import (
    APEX_POST_ACCUMULATION_FP16,
    DDP_ONE_BUCKET_FP16,
    DDP_ONE_BUCKET_FP32,
    FlatReduce,
)
from plait.workloads.traced.fusion import fuse_bn_relu
from plait.workloads.traced.optimizer_passes import (
    BERT_LAMB_1907_AMP,
    BERT_LAMB_1907_FP32,
    BERT_LAMB_2111_AMP,
    BERT_LAMB_2111_TF32,
    OptimizerPasses,
)
from plait.workloads.traced.row_framework import RowFramework, parse_framework
from plait.workloads.traced.tensor_fusion import HOROVOD_0_20, HOROVOD_0_21, TensorFusion
from plait.workloads.traced.tracing import storage_dtype, trace

MODELS = {"ResNet-50": ("plait.workload.zoo:resnet50", None), "ResNet-50 v1.5": ("plait.workload.zoo:resnet50", None),
          "ResNet-101": ("plait.workload.zoo:resnet101", None), "ResNet-152": ("plait.workload.zoo:resnet152", None),
          "BERT-large pretraining seq128": ("plait.workload.zoo:bert_large", (128,)),
          "BERT-large pretraining seq512": ("plait.workload.zoo:bert_large", (512,))}
"""Model names of the CSV -> (factory, one example's input shape; ``None``: the factory's); a name compares without
case, spaces or punctuation (:func:`model_name`). ResNet-101 and -152 are traced as v1.5, as ResNet-50 is (the
stride in the 3x3 convolution; v1's in the 1x1 changes their multiply-adds by under 2%: torchvision's v1.5 table
7.80 and 11.51 G against He et al.'s v1 7.6 and 11.3 G)."""


def model_name(name: str) -> str | None:
    """The key of :data:`MODELS` a row's model names, however cased, spaced or punctuated (``ResNet50``,
    ``resnet-152``), or ``None``."""
    return _PLAIN_MODELS.get(plain(name))


_PLAIN_MODELS = {plain(key): key for key in MODELS}
""":data:`MODELS`' keys by their plain form (:func:`model_name`)."""


UNITS = ("images_per_s", "sequences_per_s")
SGD_AFTER_LOSS_SCALE_CHECK = EagerOptimizer(
    launches_per_tensor=4, launches_per_matrix=1,
    source="torch.optim.SGD with momentum, PyTorch 1.8-1.9 (torch/optim/_functional.py sgd): per parameter "
           "tensor the momentum buffer's mul_ and add_ and the parameter's add_, a weight-decay add for the "
           "weights (DeepLearningExamples' optimizers.py get_sgd_optimizer: no decay on batch norm), and "
           "zero_grad's zero_ per gradient (set_to_none=False before PyTorch 2.0); issued after "
           "torch.cuda.amp.GradScaler.step reads found_inf on the host (.item() in _maybe_opt_step)")
"""The optimizer step of DeepLearningExamples' PyTorch ResNet-50 in mixed precision on pytorch-21.03 (training.py
``get_train_step`` @7bdfc81: ``scaler.step(optimizer)``, ``scaler.update()``, ``optimizer.zero_grad()``; main.py
builds a ``GradScaler`` for every AMP run): the host issues it tensor by tensor while the device waits on the
overflow check. Full-precision runs have no loss scaler, and pytorch-19.10's apex amp with a static loss scale
(``--static-loss-scale 256``, README @f0ef8493; apex ``LossScaler.update_scale`` reads the overflow flag only
when dynamic) reads nothing back: their steps queue behind the backward pass."""
EAGER_OPTIMIZER_SOURCES = ("DLE_PYT_RN50_2103",)
UNFUSED_ATTENTION = {"DLE_PYT_BERT_1907": "plait.workload.zoo:bert_large_unfused",
                     "DLE_PYT_BERT_2111": "plait.workload.zoo:bert_large_fused_softmax_dense_mlm"}
"""Sources whose BERT ran attention without a fused attention kernel -> the factory that traces it as it ran.
DeepLearningExamples' PyTorch BERT (``BertSelfAttention.forward``, PyTorch/LanguageModeling/BERT/modeling.py)
multiplies queries and keys into the ``batch x heads x length x length`` scores, divides them by the square root of
the head size, adds the padding mask, takes the softmax and the dropout, and multiplies by the values, at 6fe463f
(2019-09, the commit that added the pytorch:19.07 tables) and at a9e2c1d5 (2022-03, the pytorch:21.11 tables)
alike. pytorch:19.07 runs it eagerly, each step its own kernel (only the bias-GeLU is ``torch.jit.script``-ed,
``bias_gelu``); pytorch:21.11 scripts the model for NVFuser (run_pretraining.py @a9e2c1d5, lines 56-60 and
408-409), which fuses the chain between the two batched GEMMs (:func:`plait.workload.zoo.bert_large_fused_softmax`),
and decodes the masked tokens alone (``sequence_output_is_dense``, the default at a9e2c1d5:
:func:`plait.workload.zoo.bert_large_fused_softmax_dense_mlm`). Neither has a kernel that keeps the scores on chip,
which :func:`plait.workload.zoo.bert_large` traces."""
BINNED_PHASE2 = {"DLE_PYT_BERT_2111": (2565.0, 1483.0)}
"""Sources whose phase-2 (sequence 512) runs pad each mini-batch only to its longest sequence, in bins of 64 tokens
(NVIDIA LDDL sequence binning: DeepLearningExamples@a9e2c1d5, the commit that added the pytorch:21.11 tables, gives
every DGX A100 configuration of ``scripts/configs/pretrain_config.sh`` ``phase2_bin_size=64``, 'All configs using bin
size=64 with phase2 by default for improved throughput' (``scripts/run_pretraining.sh`` and ``run.sub`` themselves
default to none); README changelog 'Binned pretraining for phase2 with LDDL using a bin size of 64') -> (seconds
unbinned, seconds at bin size 64) of NVIDIA's own measurement of that phase-2 pre-training on 32 DGX A100 nodes of
Selene (``lddl/docs/images/binning_perf.gif`` at a9e2c1d5, 'Performance vs. Bin Size on BERT Phase 2 Pretraining',
bar labels). Such a run's mean padded length is 512 over that speedup (assumed: work linear in length). Two errors
of opposite sign stay: attention's quadratic part makes the length that matches the time ratio longer (plait's step
at that length is a smaller share of its step at 512 than the measured ratio: ``benchmarks/binned_length.py``), and
the figures are end-to-end latencies (the chart's axis, ``e2e_train_time``), so start-up time common to both runs
makes the steps' own ratio smaller than the measured one."""
FLAT_REDUCE = {("DLE_PYT_BERT_1907", "amp"): APEX_POST_ACCUMULATION_FP16,
               ("DLE_PYT_BERT_2111", "amp"): DDP_ONE_BUCKET_FP16, ("DLE_PYT_BERT_2111", "tf32"): DDP_ONE_BUCKET_FP32}
"""(source, precision) -> the one flat all-reduce after the last micro-batch its BERT runs reduce in
(:mod:`plait.workloads.traced.flat_reduce`): the multi-node launcher ``run.sub`` passes ``--allreduce_post_accumulation``
(lines 62-69 @6fe463f; 172-194 @a9e2c1d5) and, for fp16, ``--allreduce_post_accumulation_fp16``. pytorch:19.07's FP32
runs are not listed: at 6fe463f that path reads ``_amp_state.loss_scalers``, which only ``amp.initialize`` (fp16)
creates (fp32 became compatible in 793b92dc, 2020-03), so how they reduced is not stated; they keep DDP's buckets."""
LAMB = {("DLE_PYT_BERT_1907", "amp"): BERT_LAMB_1907_AMP, ("DLE_PYT_BERT_1907", "fp32"): BERT_LAMB_1907_FP32,
        ("DLE_PYT_BERT_2111", "amp"): BERT_LAMB_2111_AMP, ("DLE_PYT_BERT_2111", "tf32"): BERT_LAMB_2111_TF32}
"""(source, precision) -> the LAMB step its BERT runs take, pass by pass (:mod:`.optimizer_passes`): BertLAMB of
optimization.py in pytorch:19.07 (run_pretraining.py @6fe463f), FusedLAMBAMP of lamb_amp_opt in pytorch:21.11
(run_pretraining.py @a9e2c1d5, line 418)."""
HOROVOD = {"20.06-tf1-py3": HOROVOD_0_20, "mxnet-20.12-py3": HOROVOD_0_20, "mxnet-22.10-py3": HOROVOD_0_21}
"""Containers of the rows that reduce with Horovod (DeepLearningExamples' TensorFlow ConvNets runner and MXNet RN50
``runner``, whose default ``--kv-store`` is ``horovod``) -> its Tensor Fusion defaults (:mod:`.tensor_fusion`). No
release notes of NGC's MXNet 20.12 container were found: assumed Horovod 0.20 as NGC's 20.10 containers ship (0.21.0,
with the 1 ms cycle, was released 2020-11-23)."""
FUSE_BN_RELU, FUSE_BN_ADD_RELU = "--fuse-bn-relu 1", "--fuse-bn-add-relu 1"
"""Flags of a row's notes (DeepLearningExamples' MXNet runner passes both for float16) under which its batch
normalizations run fused with the ReLU, and the residual add and ReLU, after them (:mod:`.fusion`)."""
LOADER_NOTES = (("synthetic data", "synthetic"), ("data backend default is dali-gpu", "dali_gpu"),
                ("data_backend=pytorch", "framework_jpeg"),
                ("default --data-backend is dali-cpu", "dali_cpu"), ("TFRecords", "framework_jpeg"),
                ("real data", "framework_jpeg"))
"""Phrases of a ResNet-50 row's notes -> its loader, first match wins (``plait/validate/data/classic_dp.md`` says,
per source, which loader its benchmark command ran): synthetic tensors, PyTorch's DataLoader on real JPEGs
(DeepLearningExamples' configs.yml), DALI's GPU backend (the MXNet runner's default), DALI's CPU backend (the 2019
README's default ``--data-backend``), TensorFlow decoding TFRecords or JPEGs on host cores."""
LOADER_WORKERS = {"A100-SXM4-80GB": 16, "V100-SXM2-16GB": 8, "V100-SXM2-32GB": 8}
"""Loader workers per GPU of DeepLearningExamples' PyTorch ResNet-50 runs by system (configs.yml@7bdfc81,
``platform``: DGXA100 16, DGX1V 8); other runs use every core (tf.data, DALI threads)."""


def accumulation_steps(notes: str) -> int | None:
    """The accumulation steps a BERT row's notes state for its precision (``-> N for this precision`` where the
    source gives two), or ``None``."""
    chosen = re.search(r"-> (\d+) for this precision", notes)
    found = chosen or re.search(r"accumulation steps (\d+)", notes)
    return int(found.group(1)) if found else None


COLUMNS = ("source_id", "model", "framework", "gpu", "gpus", "precision", "batch_per_gpu", "measured_value", "measured_unit",
           "notes")
"""The columns a row's prediction reads (``plait/validate/data/classic_dp.md`` describes them all)."""


def row_loader(row: Record) -> Loader:
    """The input pipeline of one row: pre-tokenized shards for BERT, the loader its notes name for ResNet-50
    (:data:`LOADER_NOTES`; none named: the framework's JPEG loader, assumed)."""
    if (model_name(row["model"]) or "").startswith("BERT"):
        return get_loader("pretokenized")
    notes = row["notes"].lower()
    kind = next((k for phrase, k in LOADER_NOTES if phrase.lower() in notes), "framework_jpeg")
    workers = LOADER_WORKERS.get(row["gpu"]) if "data_backend=pytorch" in notes else None
    return get_loader(kind, workers)


def row_channels_last(row: Record, framework: RowFramework) -> bool:
    """Whether a row's convolutions ran on channels-last (NHWC) tensors: DeepLearningExamples' PyTorch configs say
    so (``memory_format: nhwc``, configs.yml@7bdfc81, mixed precision only), as its MXNet runner's flags do
    (``--conv-layout NHWC`` for float16); TensorFlow assigns NHWC to 16-bit
    convolutions on tensor-core GPUs and NCHW to fp32 ones, TF32 included (its layout assignment for compute
    capability 7.0: 'To use Tensor Cores for f16 data type, input must be in NHWC data format', 'cuDNN prefers NCHW
    data format for spatial convolutions' in f32); PyTorch's default is NCHW."""
    if "memory_format nhwc" in row["notes"] or "--conv-layout NHWC" in row["notes"]:
        return True
    return framework.name == "TensorFlow" and row["precision"] == "amp"


def row_optimizer(row: Record) -> EagerOptimizer | None:
    """How a row's optimizer step is issued: tensor by tensor after a synchronization in the mixed-precision runs
    of :data:`EAGER_OPTIMIZER_SOURCES` (:data:`SGD_AFTER_LOSS_SCALE_CHECK`), otherwise queued behind the device."""
    if row["source_id"] in EAGER_OPTIMIZER_SOURCES and row["precision"] == "amp":
        return SGD_AFTER_LOSS_SCALE_CHECK
    return None


def row_flat_reduce(row: Record) -> FlatReduce | None:
    """The flat all-reduce after the last micro-batch a row's replicas reduce in (:data:`FLAT_REDUCE`), or ``None``:
    DDP's buckets, overlapped with the backward."""
    return FLAT_REDUCE.get((row["source_id"], row["precision"]))


def row_fusion(framework: RowFramework) -> TensorFusion | None:
    """Horovod's Tensor Fusion settings of a row's container (:data:`HOROVOD`), or ``None``: it does not reduce with
    Horovod."""
    return HOROVOD.get(framework.container)


def row_optimizer_passes(row: Record) -> OptimizerPasses | None:
    """The optimizer step of a row counted pass by pass (:data:`LAMB`), or ``None``: plait's one Adam/SGD pass."""
    return LAMB.get((row["source_id"], row["precision"]))


def row_model(row: Record) -> tuple[str, tuple[int, ...] | None]:
    """The factory that traces a row's model and one example's input shape (``None``: the factory's): BERT as its
    source ran attention (:data:`UNFUSED_ATTENTION`), binned phase-2 runs at their mean padded length
    (:data:`BINNED_PHASE2`)."""
    key = model_name(row["model"])
    if key is None:
        raise ConfigError(f"{row.where}: model {row['model']!r} has no traced factory")
    factory, shape = MODELS[key]
    if key.startswith("BERT"):
        factory = UNFUSED_ATTENTION.get(row["source_id"], factory)
    if shape == (512,) and row["source_id"] in BINNED_PHASE2:
        unbinned_s, binned_s = BINNED_PHASE2[row["source_id"]]
        shape = (round(512 * binned_s / unbinned_s),)
    return factory, shape


def row_engine(framework: RowFramework) -> Engine:
    """The engine facts of a row: PyTorch rows issue every op from eager PyTorch and pay its dispatch
    (:attr:`plait.engine.facts.EngineFacts.eager_dispatch`, :mod:`plait.hardware.eager_dispatch`); TensorFlow and
    MXNet rows do not (their executors' per-op host time is not sourced: not charged)."""
    engine = get_engine()
    eager = framework.name == "PyTorch"
    return replace(engine, framework=replace(engine.framework, eager_dispatch=eager))


def predict_row(row: Record) -> ClassicResult:
    """The prediction of one CSV row (module docstring)."""
    row = with_precision_named(row)
    gpus, measured = row.count("gpus"), row.number("measured_value")
    label = f"{row['model']} {gpu_label(row['gpu'])} x{gpus} {row['precision']} b{row['batch_per_gpu'] or '?'}"
    result = lambda why: ClassicResult(row["source_id"], label, measured, None, why)
    why = unpredicted(row, UNITS)
    if why is not None:
        return result(why)
    key = model_name(row["model"])
    if key is None:
        return result(f"model {row['model']!r} has no traced factory")
    if not row["batch_per_gpu"]:
        return result("the source states no batch per GPU")
    bert = key.startswith("BERT")
    steps = accumulation_steps(row["notes"]) if bert else 1
    if steps is None:
        return result("the source states no accumulation steps")
    factory, shape = row_model(row)
    batch = row.count("batch_per_gpu")
    plan = Plan(dp_replicate=gpus, sharding="none", micro_batch=batch, global_batch=batch * steps * gpus,
                precision=PRECISIONS[row["precision"]], optimizer="adamw" if bert else "sgd")
    work = trace(factory, shape, dtype=storage_dtype(plan.precision))
    if FUSE_BN_RELU in row["notes"]:
        work = fuse_bn_relu(work, add_relu=FUSE_BN_ADD_RELU in row["notes"])
    framework = parse_framework(row["framework"], row.where)
    facts = TracedRunFacts(loader=row_loader(row), channels_last=row_channels_last(row, framework),
                           eager_optimizer=row_optimizer(row), flat_reduce=row_flat_reduce(row),
                           fusion=row_fusion(framework), optimizer_passes=row_optimizer_passes(row))
    cluster = row_cluster(row["gpu"], gpus)
    if not cluster.host_cores_per_node and facts.loader is not None and facts.loader.host_s_per_sample.value:
        return result(f"its loader ({facts.loader.kind}) prepares samples on host cores, and {row['gpu']}'s system, "
                      "which would say how many, is not named")
    est = estimate_traced(work, cluster, plan, row_engine(framework), step_interval_s, facts)
    return ClassicResult(row["source_id"], label, measured, est.tokens_per_s)


def validate_classic(path: Path, progress: Progress | None = None) -> list[ClassicResult]:
    """Every row of ``path`` (the schema of ``plait/validate/data/classic_dp.csv``)."""
    rows = read_records(path, "--classic file", COLUMNS)
    require_extra("traced", "plait validate --classic")  # every row traces a Hugging Face model
    return each(rows, predict_row, progress)


"""How ``plait validate classic`` reads its rows: each row's loader from what its source ran, and the accumulation
steps of the DGX-2H/DGX-1 BERT rows, checked against the published tables (plait/validate/data/classic_dp.md)."""

from __future__ import annotations

import pytest

from plait.errors import ConfigError
from plait.validate.datasets import dataset_path
from plait.validate.records import read_records
from plait.workloads.traced.validate import COLUMNS, accumulation_steps, row_loader


def _rows() -> list:
    return read_records(dataset_path("classic"), "--classic file", COLUMNS)


def test_each_row_carries_the_loader_its_source_ran() -> None:
    seen = {}
    for row in _rows():
        loader = row_loader(row)
        seen.setdefault((row["source_id"], row["gpu"], "synthetic" in row["notes"].lower()), loader)
    # DeepLearningExamples configs.yml@7bdfc81: data_backend pytorch; 16 workers per GPU on DGXA100, 8 on DGX1V
    assert seen[("DLE_PYT_RN50_2103", "A100-SXM4-80GB", False)].kind == "framework_jpeg"
    assert seen[("DLE_PYT_RN50_2103", "A100-SXM4-80GB", False)].workers_per_gpu == 16
    assert seen[("DLE_PYT_RN50_2103", "V100-SXM2-16GB", False)].workers_per_gpu == 8
    assert seen[("DLE_PYT_RN50_1910", "V100-SXM3-32GB", False)].kind == "dali_cpu"  # the 2019 README's default
    assert seen[("TF_BENCH_2017", "K80", True)].kind == "synthetic"  # 'Training synthetic data' tables
    assert seen[("TF_BENCH_2017", "P100", False)].kind == "framework_jpeg"  # 'Training real data'
    assert seen[("DLE_MX_RN50", "V100-SXM2-16GB", False)].kind == "dali_gpu"  # the MXNet runner's default backend
    assert all(v.kind == "pretokenized" for k, v in seen.items() if "BERT" in k[0])


@pytest.mark.parametrize(("gpu", "nodes", "seq", "precision", "steps"), [
    # README @78ec680 'Pre-training loss results' (pytorch:19.07): accumulation steps (phase 1; phase 2)
    ("V100-SXM3-32GB-H", 1, 128, "amp", 64), ("V100-SXM3-32GB-H", 1, 512, "amp", 256),
    ("V100-SXM3-32GB-H", 16, 512, "amp", 16), ("V100-SXM3-32GB-H", 64, 128, "fp32", 2),
    ("V100-SXM3-32GB-H", 64, 512, "fp32", 8), ("V100-SXM2-16GB", 1, 128, "amp", 512),
    ("V100-SXM2-16GB", 16, 512, "amp", 64)])
def test_dgx2h_and_dgx1_bert_rows_take_the_loss_tables_steps(gpu: str, nodes: int, seq: int, precision: str,
                                                              steps: int) -> None:
    found = [r for r in _rows() if r["source_id"] == "DLE_PYT_BERT_1907" and r["gpu"] == gpu
             and r.count("nodes") == nodes and r["model"].endswith(str(seq)) and r["precision"] == precision]
    assert len(found) == 1
    assert accumulation_steps(found[0]["notes"]) == steps


def test_each_row_carries_its_convolution_layout() -> None:
    from plait.workloads.traced.row_framework import parse_framework
    from plait.workloads.traced.validate import row_channels_last

    layouts = {(r["source_id"], r["precision"]): row_channels_last(r, parse_framework(r["framework"], r.where))
               for r in _rows() if "ResNet" in r["model"]}
    assert layouts[("DLE_PYT_RN50_2103", "amp")]  # configs.yml@7bdfc81: memory_format nhwc
    assert not layouts[("DLE_PYT_RN50_2103", "tf32")]  # PyTorch's default NCHW
    assert not layouts[("DLE_PYT_RN50_1910", "amp")]  # pytorch-19.10 predates torch.channels_last
    assert layouts[("DLE_TF_RN50_2006", "amp")] and not layouts[("DLE_TF_RN50_2006", "tf32")]  # TF layout assignment
    assert layouts[("DLE_MX_RN50", "amp")] and not layouts[("DLE_MX_RN50", "tf32")]  # the runner's float16 flags


def test_bert_rows_trace_attention_as_their_source_ran_it() -> None:
    from plait.workloads.traced.validate import row_model

    factories = {(r["source_id"], r["model"][-6:]): row_model(r) for r in _rows() if r["model"].startswith("BERT")}
    # modeling.py @6fe463f: eager op-by-op attention; @a9e2c1d5: the same code scripted for NVFuser
    assert factories[("DLE_PYT_BERT_1907", "seq128")] == ("plait.workload.zoo:bert_large_unfused", (128,))
    dense = "plait.workload.zoo:bert_large_fused_softmax_dense_mlm"  # modeling.py @a9e2c1d5: masked tokens decoded
    assert factories[("DLE_PYT_BERT_2111", "seq128")] == (dense, (128,))
    assert factories[("DLE_PYT_BERT_2111", "seq512")][1] == (296,)  # 512 x 1483 / 2565, LDDL binning


def test_unfused_attention_moves_its_score_matrices() -> None:
    """One layer's forward, per example, against the fused (flash) kernel: unfused (modeling.py @6fe463f,
    ``BertSelfAttention.forward``, in PyTorch 1.2) it copies queries, keys, values and context for two batched GEMMs
    and runs the scale, the mask, the softmax and the dropout as kernels of their own, and its five linear layers
    on 3-D activations (all but the GeLU's, whose bias is fused) add their bias after the product, a read and a
    write of 128 x 1024 bf16 values (524,288 bytes); fused for NVFuser the chain is one softmax, the bias in the
    GEMM. The softmax reads and writes one example's 16 heads of 128 x 128 bf16 scores: 2 x 16 x 128^2 x 2 =
    1,048,576 bytes. Two-layer copies of the factories (the same code); every layer's backward stays with its layer
    (the module tracker needs every output's gradient)."""
    pytest.importorskip("transformers")
    from collections import Counter

    from plait.workload.zoo import _bert_large
    from plait.workloads.traced.tracing import trace_factory

    def forward_ops(attention: str) -> Counter:
        work = trace_factory(lambda: _bert_large(attention, num_layers=2), attention, (128,), "int64")
        assert not any(k.backward for k in work.units[0].kernels if k.name == "bmm")
        assert len(work.units[1].kernels) == len(work.units[2].kernels)
        layer = work.units[1].kernels
        assert [k.bytes_per_example for k in layer if k.name == "_softmax"] in ([], [2 * 16 * 128**2 * 2])
        assert {k.bytes_per_example for k in layer if k.name == "add_"} <= {2 * 128 * 1024 * 2}
        return Counter(k.name for k in layer if not k.backward)

    flash = forward_ops("sdpa")
    unfused = forward_ops("eager")
    assert unfused - flash == Counter(mm=5, add_=5, clone=4, bmm=2, div=1, add=1, _softmax=1, native_dropout=1)
    assert flash - unfused == Counter(addmm=5, _scaled_dot_product_flash_attention=1)
    fused = forward_ops("fused_softmax")
    assert fused - flash == Counter(clone=4, bmm=2, _softmax=1, native_dropout=1)  # fused by its factories
    assert flash - fused == Counter(_scaled_dot_product_flash_attention=1)


def test_a_dense_masked_lm_head_decodes_the_masked_tokens_alone() -> None:
    """pytorch:21.11's BERT gathers the masked positions before the masked-LM head (modeling.py @a9e2c1d5, lines
    587-591): at 15% of 128 tokens that is 19 rows of the vocabulary decoder, whose forward product is
    2 x 19 x 1024 x 30,528 FLOPs per example, not 2 x 128 x 1024 x 30,528 over every token; the gather is one
    ``index_select``. A one-layer copy of the factory."""
    pytest.importorskip("transformers")
    from plait.workload.zoo import _bert_large
    from plait.workloads.traced.tracing import trace_factory

    work = trace_factory(lambda: _bert_large("fused_softmax", 1, 0.15), "bert", (128,), "int64")
    forward = [k for u in work.units for k in u.kernels if not k.backward]
    flops = [k.flops(1) for k in forward]
    assert any(f == pytest.approx(2 * 19 * 1024 * 30528) for f in flops)
    assert not any(f == pytest.approx(2 * 128 * 1024 * 30528) for f in flops)
    assert "index_select" in [k.name for k in forward]


def test_an_optimizer_issued_after_a_sync_waits_for_its_launches() -> None:
    from plait.cost.host import EagerOptimizer, eager_optimizer_s
    from plait.hardware.catalog import get_cluster

    cluster = get_cluster("dgx1-v100")
    eff = cluster.accelerator.efficiency
    launch_s, sync = eff.host_launch_us.value * 1e-6, eff.host_sync_us.value * 1e-6
    sgd = EagerOptimizer(launches_per_tensor=4, launches_per_matrix=1, source="test")
    shapes = [(4, 4), (4,), (2, 3, 3, 3)]  # two weights decayed, one bias: 4 + 1 + 4 + 4 + 1 = 14 launches
    assert eager_optimizer_s(sgd, shapes, 0.0, cluster, False) == pytest.approx(sync + 14 * launch_s)
    assert eager_optimizer_s(sgd, shapes, 1.0, cluster, False) == pytest.approx(sync + 1.0)  # the device is longer
    eager_s = launch_s + eff.eager_dispatch_us.value * 1e-6  # eager PyTorch dispatches each op before its launch
    assert eager_optimizer_s(sgd, shapes, 0.0, cluster, True) == pytest.approx(sync + 14 * eager_s)


def test_only_gradscaler_resnet_rows_issue_their_optimizer_after_a_sync() -> None:
    from plait.workloads.traced.validate import row_optimizer

    issued = {(r["source_id"], r["precision"]): row_optimizer(r) is not None for r in _rows() if "ResNet" in r["model"]}
    # training.py@7bdfc81 get_train_step: scaler.step reads found_inf; FP32/TF32 runs have no loss scaler;
    # pytorch-19.10's apex amp ran a static loss scale (README @f0ef8493), which reads nothing back
    assert issued[("DLE_PYT_RN50_2103", "amp")] and not issued[("DLE_PYT_RN50_1910", "amp")]
    assert not issued[("DLE_PYT_RN50_2103", "tf32")] and not issued[("DLE_PYT_RN50_2103", "fp32")]
    assert not any(v for (source, _), v in issued.items() if source != "DLE_PYT_RN50_2103")


def test_mxnet_float16_rows_fuse_batch_norm_and_pytorch_1907_amp_rows_reduce_flat() -> None:
    from plait.workloads.traced.validate import FUSE_BN_RELU, row_flat_reduce

    fused = {(r["source_id"], r["precision"]) for r in _rows() if FUSE_BN_RELU in r["notes"]}
    # the MXNet runner passes --fuse-bn-relu 1 --fuse-bn-add-relu 1 for float16 only (runner@729963dd)
    assert fused == {("DLE_MX_RN50", "amp")}
    flat = {(r["source_id"], r["precision"]) for r in _rows() if row_flat_reduce(r) is not None}
    # run.sub @6fe463f and @a9e2c1d5 pass --allreduce_post_accumulation; pytorch:19.07's fp32 path is not stated
    assert flat == {("DLE_PYT_BERT_1907", "amp"), ("DLE_PYT_BERT_2111", "amp"), ("DLE_PYT_BERT_2111", "tf32")}


def test_tensorflow_and_mxnet_rows_reduce_with_horovod_and_pytorch_rows_do_not() -> None:
    from plait.workloads.traced.row_framework import parse_framework
    from plait.workloads.traced.tensor_fusion import HOROVOD_0_20, HOROVOD_0_21
    from plait.workloads.traced.validate import row_fusion

    frameworks = {r.where: (r["source_id"], parse_framework(r["framework"], r.where)) for r in _rows()}
    fusion = {(source, framework.container): row_fusion(framework) for source, framework in frameworks.values()}
    # DeepLearningExamples' TF ConvNets runner and MXNet runner reduce with Horovod (runner.py, runner@729963dd)
    assert fusion[("DLE_TF_RN50_2006", "20.06-tf1-py3")] is HOROVOD_0_20
    assert fusion[("DLE_MX_RN50", "mxnet-22.10-py3")] is HOROVOD_0_21
    assert all(v is None for (source, _), v in fusion.items() if "PYT" in source or source == "TF_BENCH_2017")


def test_bert_rows_step_lamb_pass_by_pass_and_resnet_rows_do_not() -> None:
    from plait.workloads.traced.validate import row_optimizer_passes

    passes = {(r["source_id"], r["precision"]): row_optimizer_passes(r) for r in _rows()}
    assert all(v is not None for (source, _), v in passes.items() if "BERT" in source)
    assert all(v is None for (source, _), v in passes.items() if "RN50" in source or source == "TF_BENCH_2017")


@pytest.mark.parametrize(("cell", "name", "container"), [
    ("MXNet (NGC mxnet-20.12-py3, Horovod)", "MXNet", "mxnet-20.12-py3"),
    ("PyTorch (NGC pytorch:19.07-py3, APEX)", "PyTorch", "pytorch:19.07-py3"),
    ("TensorFlow 1.x (tf_cnn_benchmarks)", "TensorFlow", ""),  # no container named
])
def test_a_rows_framework_cell_is_parsed_into_its_framework_and_container(cell: str, name: str,
                                                                          container: str) -> None:
    from plait.workloads.traced.row_framework import RowFramework, parse_framework

    assert parse_framework(cell, "row") == RowFramework(name=name, container=container)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="row: framework 'JAX"):
        parse_framework("JAX (NGC 23.04)", "row")


@pytest.mark.parametrize("record, fields", [("1,2", 2), ("1,2,3,4", 4)])
def test_a_record_of_another_length_than_its_header_is_refused_with_both_counts(tmp_path, record, fields) -> None:
    """A record one field short or long is named with its own field count and the header's (a short record once
    read as long as its header: DictReader fills the missing fields with None)."""
    path = tmp_path / "runs.csv"
    path.write_text(f"a,b,c\n{record}\n")
    with pytest.raises(ConfigError, match=f"runs.csv:2: the record has {fields} fields, the header 3"):
        read_records(path, "--classic file", ("a",))

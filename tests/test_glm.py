"""The GLM kind: its strict reader, its cost model on hand-computed cases and invariants, its planner's choice,
its losses' slopes against autograd, coordinate descent's aggregation rule, and (slow) a run on 2 gloo ranks equal
to one process with the predicted bytes."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plait.errors import ConfigError
from plait.hardware.catalog import resolve_cluster
from plait.workloads import load
from plait.workloads.glm.cost import METHODS, glm_cost
from plait.workloads.glm.model import GlmSpec
from plait.workloads.glm.predict import plan_glm
from plait.workloads.glm.scd import local_epoch, objective, optimum, order_of, step_size
from plait.workloads.glm.scd_dual import dual_local_epoch, dual_objective, dual_step_size
from plait.workloads.glm.sgd import loss_and_slope
from tests.inprocess import cli

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
H100 = resolve_cluster("dgx-h100-ib")
DENSE = GlmSpec(name="dense", loss="logistic", samples=1_000_000, features=65_536, batch=1024)


def test_the_reader_is_strict_and_the_examples_read(tmp_path: Path) -> None:
    spec = load(str(EXAMPLES / "glm-criteo-sparse.toml")).description
    assert (spec.loss, spec.sparse, spec.nonzeros_per_sample) == ("logistic", True, pytest.approx(39.0))
    path = tmp_path / "g.toml"
    for text, rule in [('[glm]\nloss = "squared"\nsamples = 10\nfeatures = 4\nbatch = 2\nbatchh = 1\n',
                        "[glm]: unknown key 'batchh'"),
                       ('[glm]\nloss = "probit"\nsamples = 10\nfeatures = 4\nbatch = 2\n',
                        "[glm].loss='probit' must be one of squared, logistic, hinge"),
                       ('[glm]\nloss = "hinge"\nsamples = 10\nfeatures = 4\nbatch = 20\n',
                        "batch=20 must be at most samples=10"),
                       ('[glm]\nloss = "hinge"\nsamples = 10\nfeatures = 4\nbatch = 2\ndensity = 0.0\n',
                        "density=0.0 must lie in (0, 1]")]:
        path.write_text(text)
        with pytest.raises(ConfigError, match=re.escape(rule)):
            load(str(path)).description


def test_a_dense_step_by_hand() -> None:
    """8 ranks, 1024 x 65,536 fp32 batch: each pass streams its share at 0.89 of 3.35 TB/s (the H100's figures)."""
    rate = H100.accelerator.memory_bandwidth_bytes_per_s * H100.accelerator.efficiency.memory.value
    fp = glm_cost(DENSE, H100, 8, "feature_partitioned")
    forward = 1024 * 8192 * 4 + 8192 * 4 + 1024 * 4  # the batch's columns, the weight slice, z
    assert fp.forward_s == pytest.approx(forward / rate)
    assert fp.sent_bytes == 2 * 7 / 8 * 1024 * 4  # ring all-reduce of B floats
    dp = glm_cost(DENSE, H100, 8, "data_parallel")
    assert dp.sent_bytes == 2 * 7 / 8 * 65_536 * 4  # the model all-reduce
    assert dp.forward_s == pytest.approx((128 * 65_536 * 4 + 65_536 * 4 + 128 * 4) / rate)
    assert glm_cost(DENSE, H100, 8, "switch_aggregated").sent_bytes == 1024 * 4  # sent once to the switch


def test_switch_latency_on_sharp_by_hand() -> None:
    """16 ranks over two DGX H100: 2.83 us SHARP round trip plus a tree's 2 log2 8 = 6 NVLink steps of 3 us each
    way inside each node; 64 B take 64 / (50 GB/s x 0.95) more."""
    cost = glm_cost(replace(DENSE, batch=16), H100, 16, "switch_aggregated")
    assert cost.comm_s == pytest.approx(2.83e-6 + 6 * 3e-6 + 64 / (50e9 * 0.95))
    refused = glm_cost(DENSE, resolve_cluster("dgx-a100-ib"), 16, "switch_aggregated")
    assert "whose switches do not aggregate" in refused.why_not


@pytest.mark.parametrize("m", [2, 4, 16])
def test_the_pipeline_lies_between_its_busiest_resource_and_no_overlap(m: int) -> None:
    for method in METHODS[1:]:
        cost = glm_cost(DENSE, H100, 16, method, m)
        device = cost.forward_s + cost.backward_s
        assert max(max(device, cost.comm_s) + cost.update_s, cost.host_s) <= cost.step_s * (1 + 1e-12)
        assert cost.step_s <= device + cost.comm_s + cost.update_s + cost.host_s + 1e-15


@settings(max_examples=40, deadline=None)
@given(batch=st.sampled_from([16, 256, 4096]), features=st.sampled_from([1024, 65_536, 1_000_000]),
       density=st.sampled_from([1.0, 0.01, 4e-5]), ranks=st.sampled_from([2, 8, 16, 64]))
def test_what_each_split_sends_and_reads(batch: int, features: int, density: float, ranks: int) -> None:
    """The model all-reduce carries D floats whatever the batch, the feature splits B floats whatever D; doubling
    the ranks never raises a rank's HBM bytes; the step is at least the host's issuing and the device's work."""
    spec = GlmSpec(name="p", loss="hinge", samples=10**7, features=features, batch=batch, density=density)
    for method in METHODS:
        cost = glm_cost(spec, H100, ranks, method)
        assert cost.sent_bytes == {"data_parallel": 2 * (ranks - 1) / ranks * features * 4,
                                   "feature_partitioned": 2 * (ranks - 1) / ranks * batch * 4,
                                   "switch_aggregated": batch * 4}[method]
        assert glm_cost(spec, H100, 2 * ranks, method).read_bytes <= cost.read_bytes * (1 + 1e-12)
        assert cost.step_s >= max(cost.host_s, cost.device_s) * (1 - 1e-12)


def test_the_planner_splits_the_larger_dimension() -> None:
    """Many features and a small batch: the B-float all-reduce wins; few features and a large batch: the model
    all-reduce wins; data that fits no single device is refused with its reason."""
    wide = plan_glm(replace(DENSE, batch=16), H100, 8)
    assert wide.best.method != "data_parallel" and "beats" in wide.reason
    tall = plan_glm(replace(DENSE, samples=2**22, features=64, batch=2**22), H100, 8)
    assert tall.best.method == "data_parallel"
    with pytest.raises(ConfigError, match=r"no way to train dense on 1 ranks.*244\.1 GiB of data and model exceed"):
        plan_glm(DENSE, H100, 1)  # 10^6 x 65,536 fp32 = 244.1 GiB; an eighth fits one H100
    assert plan_glm(DENSE, H100, 8).best.memory_bytes < 40 * 2**30


def test_the_switch_wins_where_the_ranks_meet_on_sharp() -> None:
    """The sparse example on 16 H100 (two nodes, InfiniBand SHARP) aggregates in the switch; inside one node (NVLink
    SHARP's 23 us round trip) the ring's latency is lower; the JSON names the choice and its reason."""
    spec = load(str(EXAMPLES / "glm-criteo-sparse.toml")).description
    two_nodes = plan_glm(spec, H100, 16).to_dict()
    assert two_nodes["best"]["method"] == "switch_aggregated" and two_nodes["reason"].startswith("switch_aggregated")
    assert plan_glm(spec, H100, 8).best.method == "feature_partitioned"


def test_the_documented_commands_run_in_process() -> None:
    """docs/glm.md's estimate and plan, as written (in this process: no interpreter start); a --global-batch, which
    a GLM's TOML sets, is warned about."""
    for command in ("estimate", "plan"):
        code, out, err = cli([command, "--model", "examples/glm-criteo-sparse.toml", "--gpus", "16"])
        assert code == 0 and "chosen: switch_aggregated" in out and "warning" not in out, err
    code, out, _ = cli(["run", "--model", "examples/glm-tiny.toml", "--gpus", "2", "--global-batch", "32",
                        "--dry-run"])
    assert code == 0 and "--global-batch 32 has no effect on a GLM" in out


@pytest.mark.parametrize("loss", ["squared", "logistic", "hinge"])
def test_each_losss_slope_is_its_derivative(loss: str) -> None:
    z = torch.tensor([-2.0, -0.3, 0.4, 0.99, 3.0], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([1.0, -1.0, 1.0, 1.0, -1.0], dtype=torch.float64)
    value, slope = loss_and_slope(z, y, loss)
    (grad,) = torch.autograd.grad(value.sum(), z)
    assert torch.allclose(slope, grad)


def _ridge(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 16, generator=gen, dtype=torch.float64)
    return x, x @ torch.randn(16, generator=gen, dtype=torch.float64)


def test_coordinate_descent_reaches_the_normal_equations_optimum() -> None:
    x, y = _ridge()
    w, r = torch.zeros(16, dtype=torch.float64), -y.clone()
    for epoch in range(60):
        d = local_epoch(x, r, w, 0.01, 1, order_of(16, 0, 0, epoch))
        w, r = w + d, r + x @ d
    assert objective(x, y, w, 0.01) == pytest.approx(optimum(x, y, 0.01), rel=1e-9, abs=1e-12)


def test_the_optimal_step_minimises_the_objective_along_the_summed_update() -> None:
    """Two feature-split workers' proposals: gamma* is the least objective on a fine grid of steps."""
    x, y = _ridge(1)
    w, r = torch.zeros(16, dtype=torch.float64), -y.clone()
    parts = [slice(0, 8), slice(8, 16)]
    d = torch.cat([local_epoch(x[:, s], r, w[s], 0.01, 4, order_of(8, 0, k, 0)) for k, s in enumerate(parts)])
    u = x @ d
    gamma = step_size("optimal", 2, r, u, float(w @ d), float(d @ d), 0.01)
    grid = [objective(x, y, w + g * d, 0.01) for g in torch.linspace(0, 1.5, 301).tolist()]
    assert objective(x, y, w + gamma * d, 0.01) <= min(grid) + 1e-12


def test_dual_coordinate_ascent_reaches_the_optimum_from_below() -> None:
    """One worker's SDCA: the dual rises to the normal equations' optimum (strong duality), its line search along two
    workers' summed proposal is the best step on a grid."""
    x, y = _ridge(2)
    n, l2 = 64, 0.05
    alpha, w = torch.zeros(n, dtype=torch.float64), torch.zeros(16, dtype=torch.float64)
    for epoch in range(50):
        d = dual_local_epoch(x, y, alpha, w, l2, n, 1, order_of(n, 0, 0, epoch))
        alpha, w = alpha + d, w + x.T @ d / (l2 * n)
    assert dual_objective(x, y, alpha, l2) == pytest.approx(optimum(x, y, l2), rel=1e-8)
    alpha, w = torch.zeros(n, dtype=torch.float64), torch.zeros(16, dtype=torch.float64)
    parts = [slice(0, 32), slice(32, 64)]
    d = torch.cat([dual_local_epoch(x[s], y[s], alpha[s], w, l2, n, 4, order_of(32, 0, k, 0))
                   for k, s in enumerate(parts)])
    u = x.T @ d / (l2 * n)
    gamma = dual_step_size("optimal", 2, torch.stack([d @ (y - alpha), d @ d]), w, u, l2, n)
    grid = [dual_objective(x, y, alpha + g * d, l2) for g in torch.linspace(0, 2, 401).tolist()]
    assert dual_objective(x, y, alpha + gamma * d, l2) >= max(grid) - 1e-12


def test_operators_counted_are_those_that_launch() -> None:
    """A transpose is a view (no launch); a product and a ReLU are one launch each (plait.workloads.op_count, which the
    CPU prediction of plait run's steps reads)."""
    from plait.workloads.op_count import launches

    a, b = torch.ones(3, 2), torch.ones(3, 4)
    assert launches(lambda: (a.t() @ b).relu()) == 2


@pytest.mark.slow
def test_plait_run_equals_one_process_with_the_predicted_bytes() -> None:
    """2 gloo ranks (examples/glm-tiny.toml, 10 steps): data-parallel, feature-partitioned and switch-aggregated
    (emulated) SGD within 1e-5 of one process, every rank's bytes each step = the cost model's; coordinate descent
    split by feature and by example on the ranks = its one-process emulation, the optimal rule no worse than adding
    or averaging."""
    from plait.workloads.glm.run import TOLERANCE, run_glm

    result = run_glm(load(str(EXAMPLES / "glm-tiny.toml")).description, 2, 10, False, str(EXAMPLES / "cpu-node.toml"))
    assert result is not None
    assert set(result.step_s) == set(result.step_cpu_s) == set(result.predicted_step_s) == set(METHODS)
    assert all(t > 0 for t in (*result.step_s.values(), *result.predicted_step_s.values()))
    for method, error in result.max_weight_error.items():
        assert error <= TOLERANCE == 1e-5, method
        for steps, predicted in zip(result.sent_per_step[method], result.predicted_sent[method], strict=True):
            assert set(steps) == {predicted}, method
    for split, rules in result.scd.items():
        for found in rules.values():
            assert found["ranks"] == pytest.approx(found["one_process"], rel=1e-4, abs=1e-6), split
        final = {rule: found["ranks"][-1] for rule, found in rules.items()}
        assert final["optimal"] <= min(final["add"], final["average"]), split

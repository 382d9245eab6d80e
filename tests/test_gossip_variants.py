"""Randomized local averaging and delay-by-one gossip (Zhang, Cui et al., arXiv 2002.01119 and 2110.11199): the
random ring's consensus rate against sampled and enumerated draws, the fixed ring's against its closed-form
eigenvalue, the delay's exposed time, the multipliers scaled by the consensus rates, and (slow) the runtime on two
gloo ranks against a hand-computed recursion and the cost model's bytes."""

from __future__ import annotations

import itertools
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from plait.cost.gossip import gossip_costs
from plait.cost.partial_times import profiled_steps
from plait.cost.sync import payload_bytes
from plait.hardware.catalog import cluster_from_mapping, resolve_cluster
from plait.plan.columns import PlanColumns
from plait.plan.convergence import convergence, searched_specs
from plait.plan.gossip import consensus_rate, mixing_matrix, sources, spectral_gap
from plait.plan.partial import schedule, unit_of
from plait.plan.plan import Plan
from plait.search.request import MAX_SYNCS
from plait.sync import parse
from plait.workload.catalog import resolve_model
from plait.workload.tensors import parameter_shapes
from tests.conftest import toy_cluster_mapping
from tests.ranks import run_ranks

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "tiny-model.toml"
CLUSTER = "dgx-h100-ib"


def _ring_w(order: tuple[int, ...]) -> np.ndarray:
    """``(I + P + P^T) / 3`` of the ring laid in ``order`` (written here from the definition)."""
    n = len(order)
    w = np.eye(n) / 3
    for k, i in enumerate(order):
        w[i, order[(k + 1) % n]] += 1 / 3
        w[i, order[k - 1]] += 1 / 3
    return w


@pytest.mark.parametrize("n", [4, 5, 6])
def test_random_ring_expected_gram_is_a_identity_plus_b_off_diagonal(n: int) -> None:
    """Over every order of the ring, E[W^T W] = I/3 + 2 (11^T - I) / (3 (n - 1)); its second eigenvalue
    (n - 3) / (3 (n - 1)) is 1 - p, and the shipped topology's gap is 1 - sqrt(1 - p)."""
    grams = [(w := _ring_w(order)).T @ w for order in itertools.permutations(range(n))]
    mean = np.mean(grams, axis=0)
    b = 2 / (3 * (n - 1))
    assert np.allclose(mean, np.eye(n) / 3 + b * (np.ones((n, n)) - np.eye(n)), atol=1e-12)
    second = np.sort(np.linalg.eigvalsh(mean))[-2]
    assert second == pytest.approx((n - 3) / (3 * (n - 1)), abs=1e-12)
    assert spectral_gap("random_ring", n, 1) == pytest.approx(1 - math.sqrt(second), abs=1e-12)


def test_random_ring_draws_sample_that_expectation() -> None:
    """The runtime's draws (one ring per step, seeded by the step) average to the closed form: 4000 steps on 8
    replicas, each entry within 0.01 (its sampling error is ~0.003)."""
    n, steps = 8, 1500
    mean = np.zeros((n, n))
    for step in range(steps):
        w = mixing_matrix("random_ring", n, 1, step)
        assert np.allclose(w, w.T) and all(len(sources("random_ring", n, 1, step, i)) == 2 for i in range(n))
        mean += w.T @ w / steps
    expected = np.eye(n) / 3 + 2 / (3 * (n - 1)) * (np.ones((n, n)) - np.eye(n))
    assert np.abs(mean - expected).max() < 0.01
    first, second = mixing_matrix("random_ring", n, 1, 0), mixing_matrix("random_ring", n, 1, 1)
    assert not np.allclose(first, second)  # re-drawn every step


def test_random_ring_keeps_its_gap_as_the_fixed_ring_loses_it() -> None:
    """The fixed ring's gap is 1 - (1 + 2 cos(2 pi / n)) / 3 ~ 4 pi^2 / (3 n^2); the random ring's tends to
    1 - 1/sqrt(3)."""
    for n in (16, 64, 256):
        assert spectral_gap("ring", n, 1) == pytest.approx(1 - (1 + 2 * math.cos(2 * math.pi / n)) / 3, rel=1e-9)
        assert spectral_gap("random_ring", n, 1) > 1 - 1 / math.sqrt(3) - 1e-12
    assert spectral_gap("ring", 256, 1) * 256**2 == pytest.approx(4 * math.pi**2 / 3, rel=1e-3)


def test_delay_by_one_exposes_only_what_outlasts_the_compute() -> None:
    """Ring on 4 replicas of one toy node (100 GB/s NVLink, no latency, 1000 GB/s HBM), 1e9 fp32 parameters: two
    4 GB copies out take 0.08 s; the mix streams (6 + 3 x 2) x 4 GB, 0.048 s. Behind 0.05 s of compute the delayed
    exchange shows 0.03 s; behind 1 s, nothing; it holds one more copy."""
    cluster = cluster_from_mapping(toy_cluster_mapping(), "toy")
    cols = PlanColumns.one(Plan(dp_replicate=4))
    now = gossip_costs(cluster, parse("gossip:topology=ring"), cols, 4, 1, 1e9, 0.05)
    late = [gossip_costs(cluster, parse("gossip:topology=ring,delay=1"), cols, 4, 1, 1e9, b) for b in (0.0, 0.05, 1.0)]
    assert now[1] == pytest.approx(0.128) and late[0][1] == pytest.approx(0.128)
    assert [x[1] for x in late[1:]] == pytest.approx([0.078, 0.048])
    assert (now[2], late[1][2]) == pytest.approx((8e9, 12e9))


def test_multipliers_beyond_four_replicas_scale_by_the_consensus_rates() -> None:
    """Measured at 4 replicas; at n the extra steps grow as p(4)/p(n) (Koloskova et al. 2020, Theorem 2), with the
    fixed ring's p = 1 - ((1 + 2 cos(2 pi / n)) / 3)^2; where the ring's gap collapses the random ring wins."""
    ring = parse("gossip:topology=ring")
    measured = convergence(ring, 4)
    assert measured.basis == "measured"
    p = lambda n: 1 - ((1 + 2 * math.cos(2 * math.pi / n)) / 3) ** 2  # noqa: E731
    at_16 = convergence(ring, 16)
    assert at_16.basis == "derived" and "Koloskova" in at_16.source
    assert at_16.factor == pytest.approx(1 + (measured.factor - 1) * p(4) / p(16), rel=1e-9)
    assert consensus_rate("ring", 16, 1) == pytest.approx(p(16), rel=1e-9)
    randomized = parse("gossip:topology=random_ring")
    assert convergence(randomized, 4).basis == "measured"
    assert convergence(randomized, 64).factor < convergence(ring, 64).factor / 10
    grid = {method.spec for method in searched_specs()}  # the variants only when --dp-sync names them
    assert randomized.spec in grid and parse("gossip:topology=ring,delay=1").spec not in grid
    assert len(grid) < MAX_SYNCS - 1


@pytest.mark.slow
def test_delay_by_one_runs_as_its_recursion_and_sends_the_predicted_bytes(tmp_path: Path) -> None:
    """Two gloo ranks, 3 steps of the tiny model. Over the complete graph (weights 1/2) with delay 1 and SGD, each
    replica follows x_{k+1, i} = mean_j x_{k, j} - lr g_i(x_{k, i}), computed here in one process (within 1e-5),
    and every rank sends the cost model's bytes every step (the random ring with delay on 4 ranks:
    tests/test_sync_architectures.py). In the same run, DreamDDP's profiled schedule (H = 3, times of the
    dgx-h100-ib preset) all-reduces at each step exactly the units the cost model assigns to it."""
    torch = pytest.importorskip("torch")
    from plait.run.converge import LEARNING_RATES
    from plait.run.data import global_batch, rank_slice
    from plait.run.model import build_model
    from plait.run.train import cross_entropy

    ranks, steps, batch = 2, 3, 8
    cases = ["gossip:topology=complete,delay=1@sgd", "dreamddp:every=3,schedule=profiled@adamw"]
    out = tmp_path / "runs.json"
    done = run_ranks(ranks, ["-m", "plait.run.converge", "--out", str(out), "--model", str(MODEL), "--steps",
                             str(steps), "--batch", str(batch), "--cluster", CLUSTER, *cases],
                     env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(out.read_text())

    spec, lr = resolve_model(str(MODEL)), LEARNING_RATES["sgd"]
    replicas = [build_model(spec, spec.seq_len, seed=0) for _ in range(ranks)]
    losses = []
    for step in range(steps):
        inputs, targets = global_batch(step, batch, spec.seq_len)
        grads, total = [], 0.0
        for i, model in enumerate(replicas):
            model.zero_grad()
            loss = cross_entropy(model(rank_slice(inputs, i, ranks)), rank_slice(targets, i, ranks))
            loss.backward()
            total += loss.item() / ranks
            grads.append([p.grad.clone() for p in model.parameters()])
        losses.append(total)
        with torch.no_grad():
            mean = [sum(ps) / ranks for ps in zip(*(list(m.parameters()) for m in replicas))]
            for model, grad in zip(replicas, grads):
                for p, m, g in zip(model.parameters(), mean, grad):
                    p.copy_(m - lr * g)
    assert runs[cases[0]]["losses"] == pytest.approx(losses, rel=1e-5)

    named = parameter_shapes(spec)
    sync = parse(cases[0].rpartition("@")[0])
    expected = [[payload_bytes(sync, named, step, rank, ranks) for step in range(steps)] for rank in range(ranks)]
    assert runs[cases[0]]["bytes_by_rank"] == expected

    # DreamDDP's profiled schedule: the runtime averages the units the cost model assigns to each step
    at, _ = profiled_steps(named, resolve_cluster(CLUSTER), ranks, 1, batch // ranks * spec.seq_len, steps)
    assert sorted(set(at.values())) == [0, 1, 2] and at != schedule(named, steps)  # not the parameter-count cut
    unit_bytes = [4 * sum(math.prod(shape) for name, shape in named if at[unit_of(name)] == k) for k in range(steps)]
    assert runs[cases[1]]["bytes_by_rank"] == [unit_bytes] * ranks

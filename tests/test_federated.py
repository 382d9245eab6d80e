"""Federated rounds (plait.workloads.federated): hand-computed round costs, the strict reader, estimate and plan through
the command line, PFLEGO's exact-gradient property in one process, and (slow) both methods on gloo ranks as a server
and clients: equal to one process, bytes counted = bytes predicted, the applied gradient = the objective's."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from plait.errors import ConfigError
from plait.workloads.federated.cost import NoClientInTime, client_flops, round_cost, shapes, transfer_bytes
from plait.workloads.federated.model import read_federated
from tests.federated_toy import FIG, tiny_federation
from tests.inprocess import cli

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "federated-toy.toml"
TINY = tiny_federation(0.1, 0.0, "[1, 3]", "[0.1, 1.0]", run="clients = 2")


def tiny(tmp_path: Path, text: str = TINY) -> Path:
    path = tmp_path / "fed.toml"
    path.write_text(text)
    return path


def test_a_tiny_mlps_round_is_counted_by_hand(tmp_path: Path) -> None:
    """2 -> 3 -> 2 with biases: body 9 values, head 8; per sample the body 6 MACs (all in its first layer), the
    head 6. PFLEGO, tau = 3, 4 samples: features once 2x6, two head steps 2 x 4x6, the joint step 6x6 + 2x6 + 0
    (the first layer's input gradient is skipped) = 108 FLOPs a sample. FedAvg: 3 steps of 2x12 + 2x12 + 2x(12-6)."""
    s = shapes(read_federated(tiny(tmp_path)).model)
    assert (s.body_params, s.head_params, s.body_macs, s.head_macs) == (9, 8, 6, 6)
    assert client_flops(s, "pflego", 3, 4, True) == 4 * 108
    assert client_flops(s, "pflego", 3, 4, False) == 4 * (108 + 2 * 2 * 6)  # the features on every step
    assert client_flops(s, "fedavg", 3, 4, True) == 3 * 4 * 60
    assert transfer_bytes(s, "pflego", 4) == (36, 36) and transfer_bytes(s, "fedavg", 4) == (68, 68)


def test_the_round_waits_for_the_slowest_client_and_prices_its_energy(tmp_path: Path) -> None:
    spec = read_federated(tiny(tmp_path))
    cost = round_cost(spec)
    compute_s = 432 / (8.1e12 * 0.5)  # T4 fp32 peak (datasheet) at the stated efficiency
    link_s = 2 * 0.01 + 36 / 200 + 36 / 100
    assert cost.participants == 1 and cost.compute_s == pytest.approx(compute_s)
    assert cost.link_s == pytest.approx(link_s) and cost.round_s == pytest.approx(compute_s + link_s)
    # T4's 70 W rating; power.toml: busy at 1.0 of it, communicating at 0.35
    assert cost.client_energy_j == pytest.approx(70 * compute_s + 0.35 * 70 * link_s)
    spread = read_federated(tiny(tmp_path, TINY.replace("value = 0.0", "value = 1.0").replace(
        "participation = 0.1\n", "participation = 0.3\n")))
    slow = round_cost(spread)  # 3 clients: the 3/4 quantile of a log-normal, exp(z_0.75) with z_0.75 = 0.6745
    assert slow.participants == 3 and slow.slowest_factor == pytest.approx(math.exp(0.6745), rel=1e-4)
    cut = round_cost(replace(spread, stragglers=replace(spread.stragglers, deadline_s=slow.client_s)))
    assert cut.round_s == slow.client_s and cut.kept_fraction == pytest.approx(0.5)  # Phi(ln 1) = 1/2
    with pytest.raises(NoClientInTime, match="no client finishes"):
        round_cost(replace(spec, stragglers=replace(spec.stragglers, deadline_s=0.1)))


def test_a_deadline_that_drops_clients_takes_the_multiplier_of_the_clients_that_finish(tmp_path: Path) -> None:
    """Every client selected and half of them late: the round is ranked with the rounds measured at participation
    0.1 (at most the 0.5 that finish), not at 1.0; no figure at or below 0.5: not ranked, with the reason."""
    from plait.workloads.federated.plan import NO_MULTIPLIER, plan_federated

    figures = "".join(f'[[rounds_to_loss]]\nmethod = "pflego"\nlocal_steps = 3\nparticipation = {p}\nrounds = {r}\n'
                      f'target_loss = 0.3\n{FIG}\n' for p, r in ((0.1, 40), (1.0, 10)))
    text = TINY.replace("value = 0.0", "value = 1.0").replace('participation = [0.1, 1.0]', 'participation = [1.0]')
    spec = read_federated(tiny(tmp_path, text + figures))
    median = round_cost(spec, participation=1.0).client_s
    late = replace(spec, stragglers=replace(spec.stragglers, deadline_s=median), plan=replace(
        spec.plan, methods=("pflego",), local_steps=(3,)))
    (best,), = [plan_federated(late, "time").ranked]
    assert best.rounds == 40 and best.cost.kept_fraction == pytest.approx(0.5) and best.cost.round_s == median
    on_time = plan_federated(replace(late, stragglers=replace(spec.stragglers, deadline_s=0.0)), "time")
    assert on_time.ranked[0].rounds == 10
    none = plan_federated(replace(late, rounds_to_loss=spec.rounds_to_loss[1:]), "time")
    assert none.ranked == () and none.infeasible == {NO_MULTIPLIER: 1}


@pytest.mark.parametrize("old, new, rule", [
    ("participation = 0.1\n", "participation = 1.5\n", "participation=1.5 must be a fraction in (0, 1]"),
    ("batch = 4\n", "batch = 8\n", "batch=8 must be <= samples_per_client=4"),
    ("classes = 2\n", "classes = 2\nheads = 1\n", "[model]: unknown key 'heads'"),
    ("body = [3]\n", "body = []\n", "[model].body=[] must list at least one hidden width"),
    ('method = "pflego"', 'method = "fedprox"', "method='fedprox' must be one of pflego, fedavg"),
    ("[run]\nclients = 2\n", "[run]\nclients = 9\n", "[run].clients=9 must be 2-7"),
])
def test_the_reader_is_strict(tmp_path: Path, old: str, new: str, rule: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(rule)):
        read_federated(tiny(tmp_path, TINY.replace(old, new)))


def test_estimate_and_plan_of_the_example_through_the_cli() -> None:
    code, out, err = cli(["estimate", "--model", str(EXAMPLE), "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["download_bytes"] == (32 * 64 + 64 + 64 * 64 + 64) * 4 and doc["participants"] == 10
    assert doc["time_to_loss_s"] == pytest.approx(doc["rounds"] * doc["round_s"])
    code, out, err = cli(["plan", "--model", str(EXAMPLE), "--top", "30", "--json"])
    assert code == 0, err
    ranked = json.loads(out)["ranked"]
    times = [r["time_to_loss_s"] for r in ranked]
    assert len(ranked) == 24 and times == sorted(times)
    code, _, err = cli(["plan", "--model", str(EXAMPLE), "--objective", "cost"])
    assert code == 2 and "planned by time" in err


def test_pflegos_server_step_is_the_objectives_gradient_and_unbiased_over_selections() -> None:
    """Every client selected, the server applies the gradient of sum_i alpha_i l_i at the round's weights; one client
    selected at a time, the mean over the three selections is that gradient too (the (I / r) scaling)."""
    torch = pytest.importorskip("torch")
    from plait.workloads.federated import toy
    from plait.workloads.federated.config import FederatedRunConfig

    config = FederatedRunConfig(clients=3, local_steps=3, out=Path("unused"))
    data = [toy.client_data(config, i) for i in range(3)]
    body = toy.init_body(config)
    results = [toy.pflego_client(body, toy.init_head(config, i), data[i], 3, config.head_lr, config.lr)
               for i in range(3)]
    leaf = [(w.clone().requires_grad_(), b.clone().requires_grad_()) for w, b in body]
    objective = sum(toy.loss(leaf, at, x, y) for (_, _, at), (x, y) in zip(results, data)) / 3
    full = torch.cat([g.reshape(-1) for g in torch.autograd.grad(objective, [t for p in leaf for t in p])])
    _, every = toy.pflego_server(body, [r[0] for r in results], 3, config.lr)
    singles = [toy.pflego_server(body, [r[0]], 3, config.lr)[1] for r in results]
    torch.testing.assert_close(every, full, atol=1e-6, rtol=0)
    torch.testing.assert_close(sum(singles) / 3, full, atol=1e-6, rtol=0)


@pytest.mark.slow
def test_both_methods_on_gloo_ranks_equal_one_process_with_the_predicted_bytes(tmp_path: Path) -> None:
    """1 server + 2 client ranks, 3 rounds: losses = one process within 1e-5, every client's bytes per round each way
    = the cost model's, and PFLEGO's applied gradient = the clients' whole objective's within 1e-6."""
    pytest.importorskip("torch")
    from plait.workloads.federated.run import run_federated

    spec = read_federated(tiny(tmp_path))
    result = run_federated(spec, 3, dry_run=False)
    assert result is not None
    for method in ("pflego", "fedavg"):
        r = result[method]
        assert r["loss_diff"] < 1e-5
        assert r["download_bytes_per_round"] == [r["predicted_download"]] * 2 == [transfer_bytes(
            shapes(spec.model), method, 4)[0]] * 2
        assert r["upload_bytes_per_round"] == [r["predicted_upload"]] * 2
    assert result["pflego"]["exact_gradient_diff"] < 1e-6 and result["pflego"]["applied_diff"] < 1e-6
    assert result["pflego"]["predicted_upload"] < result["fedavg"]["predicted_upload"]  # no head on the link
    assert all(result[m]["round_s"] > 0 and result[m]["client_cpu_s"] > 0 for m in ("pflego", "fedavg"))

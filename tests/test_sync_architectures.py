"""Beyond the all-reduce: parameter servers, in-network aggregation and gossip — the specs, the
topologies' maths against closed forms, the bytes each rank sends (cost model against what the runtime counted,
rank by rank, as integers) and exactness where the maths is exact."""

from __future__ import annotations

import cmath
import json
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest

from plait.cost.servers import server_sent_bytes, switch_bytes, switch_sent_bytes
from plait.cost.sync import payload_bytes
from plait.errors import ConfigError
from plait.plan.factors import factored
from plait.plan.gossip import TOPOLOGIES, mixing_matrix, sources, spectral_gap, targets
from plait.plan.servers import placement
from plait.sync import parse
from plait.workload.catalog import resolve_model
from plait.workload.tensors import parameter_shapes
from tests.ranks import run_ranks

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "tiny-model.toml"
RANKS, STEPS = 4, 4
CASES = ["allreduce@adamw", "param_server:servers=2,placement=layerwise@adamw", "param_server:servers=4@sgd",
         "allreduce@sgd", "switch_aggregation@adamw", "switch_aggregation:bits=16@adamw", "gossip:topology=ring@adamw",
         "gossip:topology=exponential@adamw", "gossip:topology=random,peers=2@adamw", "gossip:topology=complete@sgd",
         "gossip:topology=random_ring,delay=1@adamw", "local_sgd:every=1@sgd"]


def test_specs_take_named_choices_and_refuse_in_one_line() -> None:
    assert parse("param_server").spec == "param_server:servers=1,placement=balanced,host=ranks,hybrid=false"
    spec = parse("param_server:placement=layerwise,servers=4")
    assert spec.placement == "layerwise" and spec.spec.startswith("param_server:servers=4,placement=lay")
    assert parse("gossip:topology=random,peers=3").spec == "gossip:topology=random,peers=3,delay=0"
    assert parse("switch_aggregation").spec == "switch_aggregation:bits=32"
    for bad, rule in (("gossip:topology=star", "must be one of ring, torus"),
                      ("gossip:topology=ring,peers=2", "peers applies to topology=exponential|random"),
                      ("switch_aggregation:bits=24", "bits must be one of 16, 32"),
                      ("easgd:every=4", "needs alpha"), ("param_server:placement=1", "must be one of balanced")):
        with pytest.raises(ConfigError, match=re.escape(rule)) as caught:
            parse(bad)
        assert "\n" not in str(caught.value)


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_every_mixing_matrix_is_doubly_stochastic_and_matches_its_sends(topology: str, n: int) -> None:
    for step in range(3):
        w = mixing_matrix(topology, n, 2 if topology in ("random", "exponential") else 1, step)
        assert np.allclose(w.sum(axis=0), 1.0) and np.allclose(w.sum(axis=1), 1.0) and (w >= 0).all()
        peers = 2 if topology in ("random", "exponential") else 1
        for i in range(n):
            assert [j for j in range(n) if j != i and w[i, j] > 0] == sources(topology, n, peers, step, i)
            assert all(i in sources(topology, n, peers, step, j) for j in targets(topology, n, peers, step, i))


def _circulant_gap(n: int, offsets: list[int]) -> float:
    """1 - max_{k != 0} |eigenvalue k| of the circulant averaging over offsets (the own copy included): the DFT
    of its first row (Gray, "Toeplitz and circulant matrices", Sec. 3.1)."""
    weight = 1.0 / (len(offsets) + 1)
    return 1.0 - max(abs(weight * (1 + sum(cmath.exp(-2j * math.pi * k * d / n) for d in offsets)))
                     for k in range(1, n))


def test_spectral_gaps_equal_the_closed_forms() -> None:
    """A ring of n with weights 1/3 has eigenvalues (1 + 2 cos(2 pi k / n)) / 3; the static exponential graph and
    the complete graph are circulants."""
    for n in (4, 8, 16):
        assert spectral_gap("ring", n, 1) == pytest.approx(1 - (1 + 2 * math.cos(2 * math.pi / n)) / 3)
        assert spectral_gap("exponential", n, 8) == pytest.approx(_circulant_gap(n, [2**k for k in range(
            math.ceil(math.log2(n)))]))
        assert spectral_gap("complete", n, 1) == pytest.approx(1.0)
    # one-peer exponential graph on a power of two: the mean of W^T W over the period still mixes, more slowly
    assert 0 < spectral_gap("exponential", 16, 1) < spectral_gap("exponential", 16, 4)
    assert spectral_gap("torus", 16, 1) > spectral_gap("ring", 16, 1)  # a 4x4 torus mixes faster than a ring


def test_server_placement_balances_elements_or_whole_tensors() -> None:
    assert placement([(4,), (3,)], 2, "balanced") == ([0, 1], [4, 3])
    assert placement([(2,), (5,), (3,)], 2, "layerwise") == ([1, 2, 0], [5, 5])  # LPT: 5 | 3 then 2
    assert placement([(10,), (1,), (1,)], 2, "layerwise") == ([0, 1, 2], [10, 2])


def test_bytes_per_rank_by_hand() -> None:
    ps = parse("param_server:servers=2")
    # E = 7 elements, loads [4, 3]: a server pushes the other piece and returns its sum to the 2 other ranks
    pieces = [("a.bias", (4,)), ("b.bias", (3,))]
    assert [server_sent_bytes(ps, pieces, r, 3) for r in range(3)] == [4 * (3 + 2 * 4), 4 * (4 + 2 * 3), 4 * 7]
    for n in (2, 4, 8):  # n balanced servers on n ranks: each sends the ring all-reduce's 2 (n-1)/n of 4E bytes
        full = parse(f"param_server:servers={n}")
        assert server_sent_bytes(full, [("a.weight", (n * 16,))], 0, n) == 2 * (n - 1) * 4 * 16
    switch = parse("switch_aggregation:bits=16")
    assert switch_bytes(switch, 100) == 200 + 2  # 2-byte codes, one exponent byte per 64-element slot
    assert [switch_sent_bytes(switch, [("a.weight", (100,))], r, 3) for r in range(3)] == [2 * 202, 202, 202]


def test_hybrid_picks_sufficient_factors_by_poseidons_costs() -> None:
    """Poseidon (ATC 2017, Table 1): SFB moves 2K(P-1)(M+N) elements per worker, colocated servers 2MN(P+S-2)/S.
    VGG-19's fc6 (4096 x 25088) at 32 images and 8 machines: 13.1M against 360M, factors; its conv layers (4-D)
    and an embedding table never are; a 16 x 256 projection at 16 rows: 26,112 against 16,384, servers."""
    named = [("fc6.weight", (4096, 25088)), ("conv1.weight", (64, 3, 3, 3)), ("tok_embeddings.weight", (256, 64)),
             ("fc6.bias", (4096,))]
    assert factored(named, 32, 8, 8) == [True, False, False, False]
    assert factored([("wk.weight", (16, 256))], 16, 4, 2) == [False]
    assert factored([("wq.weight", (256, 256))], 16, 4, 2) == [True]
    assert factored(named, 32, 1, 1) == [False] * 4  # one replica sends nothing
    # a 4 x 3 weight at 1 row over 3 replicas, 1 server (14 <= 24: factors), and a 4-element bias on the server
    hybrid = parse("param_server:servers=1,hybrid=true")
    pieces = [("w.weight", (4, 3)), ("w.bias", (4,))]
    factors = 4 * 2 * (4 + 3)  # 1 row of X and dY, fp32, to each of 2 peers
    assert [server_sent_bytes(hybrid, pieces, r, 3, tokens=1) for r in range(3)] == [
        factors + 4 * 2 * 4, factors + 4 * 4, factors + 4 * 4]


def test_switch_rounding_stays_within_the_derived_bound() -> None:
    """SwitchML's fixed point (plait.run.servers.encode): the mean of n ranks' values errs by at most
    2^(e + ceil(log2 n) - B + 1) per element, and the integer sum never leaves B bits."""
    torch = pytest.importorskip("torch")
    from plait.run.servers import decode, encode, rounding_bound, slot_exponents

    generator = torch.Generator().manual_seed(0)
    for n, bits in ((2, 32), (3, 16), (4, 32), (8, 16)):
        scales = torch.logspace(-6, 3, 10).repeat_interleave(64)  # every 64-element slot its own magnitude
        values = [torch.randn(640, generator=generator) * scales for _ in range(n)]
        exponents = torch.stack([slot_exponents(v) for v in values]).amax(dim=0)
        encoded = [encode(v, exponents, n, bits) for v in values]
        summed = torch.stack([c.to(torch.int64) for c, _ in encoded]).sum(dim=0)
        assert summed.abs().max() < 2 ** (bits - 1)
        mean = decode(summed, encoded[0][1], n).to(torch.float64)
        exact = torch.stack(values).to(torch.float64).mean(dim=0)
        bound = torch.tensor([rounding_bound(int(e), n, bits) for e in exponents]).repeat_interleave(64)
        assert ((mean - exact).abs() <= bound + exact.abs() * 2.0**-24).all()


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("architectures") / "runs.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = run_ranks(RANKS, ["-m", "plait.run.converge", "--out", str(out), "--model", str(MODEL), "--steps",
                             str(STEPS), *CASES], env=env, cwd=str(out.parent))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in CASES if not c.startswith(("allreduce", "local_sgd"))])
def test_each_rank_sends_the_cost_models_bytes(trained, case: str) -> None:  # type: ignore[no-untyped-def]
    """Every step of every rank, counted at torch.distributed.isend, equals the cost model's payload to the byte."""
    sync = parse(case.rpartition("@")[0])
    named = parameter_shapes(resolve_model(str(MODEL)))
    expected = [[payload_bytes(sync, named, step, rank, RANKS) for step in range(STEPS)] for rank in range(RANKS)]
    assert trained[case]["bytes_by_rank"] == expected


@pytest.mark.parametrize("case, reference", [
    ("param_server:servers=2,placement=layerwise@adamw", "allreduce@adamw"),
    ("param_server:servers=4@sgd", "allreduce@sgd"), ("switch_aggregation@adamw", "allreduce@adamw"),
    ("gossip:topology=complete@sgd", "local_sgd:every=1@sgd")])
def test_exact_architectures_train_as_their_reference(trained, case: str, reference: str) -> None:  # type: ignore[no-untyped-def]
    """Parameter servers sum what the all-reduce sums; 32-bit switch aggregation errs by ~2^-29 of each slot's
    largest value (test above); gossip over the complete graph with weights 1/n is the all-reduce average."""
    assert trained[case]["losses"] == pytest.approx(trained[reference]["losses"], rel=1e-5)


@pytest.mark.parametrize("case", ["switch_aggregation:bits=16@adamw", "gossip:topology=ring@adamw",
                                  "gossip:topology=exponential@adamw", "gossip:topology=random,peers=2@adamw",
                                  "gossip:topology=random_ring,delay=1@adamw"])
def test_inexact_architectures_still_train(trained, case: str) -> None:  # type: ignore[no-untyped-def]
    losses = trained[case]["losses"]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    assert losses != trained["allreduce@adamw"]["losses"]


WIDE = ROOT / "tests" / "data" / "wide-model.toml"
WIDE_BATCH = 8


@pytest.mark.slow
def test_hybrid_trains_as_the_all_reduce_and_sends_the_predicted_bytes(tmp_path: Path) -> None:
    """Poseidon's hybrid on a wide, short model (2 sequences of 8 tokens per replica): most linear layers go as
    sufficient factors, the one-head keys and values, the embedding and the norms through 2 servers; the gradients
    rebuilt from factors are the all-reduce's sums, and every rank sends the cost model's bytes."""
    pytest.importorskip("torch")
    sync = parse("param_server:servers=2,hybrid=true")
    named = parameter_shapes(resolve_model(str(WIDE)))
    tokens = WIDE_BATCH // RANKS * resolve_model(str(WIDE)).seq_len
    flags = factored(named, tokens, RANKS, 2)
    assert 0 < sum(flags) < sum(len(shape) == 2 for _, shape in named)  # both kinds of linear layer
    out = tmp_path / "runs.json"
    cases = ["allreduce@adamw", f"{sync.spec}@adamw"]
    done = run_ranks(RANKS, ["-m", "plait.run.converge", "--out", str(out), "--model", str(WIDE), "--steps",
                             str(STEPS), "--batch", str(WIDE_BATCH), *cases],
                     env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(out.read_text())
    assert runs[cases[1]]["losses"] == pytest.approx(runs[cases[0]]["losses"], rel=1e-5)
    expected = [[payload_bytes(sync, named, step, rank, RANKS, tokens) for step in range(STEPS)]
                for rank in range(RANKS)]
    assert runs[cases[1]]["bytes_by_rank"] == expected
    plain = payload_bytes(parse("param_server:servers=2"), named, 0, 0, RANKS)
    assert expected[0][0] < plain  # fewer bytes than the servers alone, as the choice intends

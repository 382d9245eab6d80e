"""Parallel DiT inference on gloo ranks: every exact method (Ulysses, ring, USP, CFG parallel, tensor parallel,
and DistriFusion and PipeFusion while they are synchronous) gives one process's denoised latent; DistriFusion's and
PipeFusion's stale attentions stay within the derived bound of attention over fresh K, V; every rank's counted
bytes equal the cost model's (:func:`plait.workloads.dit.sent_bytes.rank_sent_bytes`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plait.workloads.dit.predict import parse_dit_plan
from plait.workloads.dit.sent_bytes import rank_sent_bytes
from tests.ranks import run_ranks

STEPS, LAYERS, HIDDEN, SIDE, BATCH, GUIDANCE = 4, 2, 64, 8, 2, 4.0
PATCH_VALUES = 2 * 2 * 4  # patch 2, 4 latent channels (DitConfig's defaults)
FP32 = 4
SHAPE = ["--steps", str(STEPS), "--layers", str(LAYERS), "--hidden", str(HIDDEN), "--side", str(SIDE), "--batch",
         str(BATCH), "--guidance", str(GUIDANCE)]


def _run(tmp_path: Path, name: str, ranks: int, *extra: str) -> dict:  # type: ignore[type-arg]
    out = tmp_path / f"{name}.json"
    done = run_ranks(ranks, ["-m", "plait.workloads.dit.worker", *SHAPE, *extra, "--out", str(out)], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def _predicted(parallel: str, warmup: int) -> list[float]:
    return rank_sent_bytes(parse_dit_plan(parallel), image_tokens=SIDE * SIDE, hidden=HIDDEN,
                           patch_values=PATCH_VALUES, layers=LAYERS, batch=BATCH, steps=STEPS, warmup=warmup,
                           guided=True, element_bytes=FP32)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    from plait.run.config import read_config
    from plait.run.workload_configs import DitConfig
    from plait.workloads.dit.worker import run

    return torch.tensor(run(read_config(DitConfig, ["--ranks", "1", *SHAPE, "--out", "unused"]))["latent"])


EXACT = [
    ("ulysses=2", ["--ulysses", "2"]),
    ("ring=2", ["--ring", "2"]),
    ("cfg=2", ["--cfg", "2"]),
    ("tp=2", ["--tp", "2"]),
    ("distrifusion=2", ["--distrifusion", "2", "--warmup", str(STEPS)]),
    ("pipefusion=2,patches=2", ["--pipefusion", "2", "--patches", "2", "--warmup", str(STEPS)]),
]


@pytest.mark.parametrize("parallel, flags", EXACT, ids=[p for p, _ in EXACT])
def test_each_exact_method_denoises_as_one_process_and_sends_the_predicted_bytes(
        tmp_path: Path, reference, parallel: str, flags: list[str]) -> None:  # type: ignore[no-untyped-def]
    import torch

    result = _run(tmp_path, "run", 2, *flags)
    torch.testing.assert_close(torch.tensor(result["latent"]), reference, atol=1e-5, rtol=0)
    assert result["bytes_sent"] == _predicted(parallel, STEPS)


def test_usp_ulysses_inside_ring_across_four_ranks_is_exact(tmp_path: Path, reference) -> None:  # type: ignore[no-untyped-def]
    import torch

    result = _run(tmp_path, "usp", 4, "--ulysses", "2", "--ring", "2")
    torch.testing.assert_close(torch.tensor(result["latent"]), reference, atol=1e-5, rtol=0)
    # by hand, per rank, layer and step: 16 tokens x 64 wide x 4 passes x 4 bytes = 16,384; Ulysses sends half of
    # Q, K, V and O (2 x 16,384), the ring one K, V block (2 x 16,384)
    assert result["bytes_sent"] == [STEPS * LAYERS * 4 * 16_384] * 4 == _predicted("ulysses=2,ring=2", 1)


@pytest.mark.parametrize("inside", ["ulysses", "ring"])
def test_pipefusion_with_sequence_parallelism_inside_its_stages_on_four_ranks(tmp_path: Path, reference,  # type: ignore[no-untyped-def]
                                                                              inside: str) -> None:
    """xDiT's PipeFusion x USP: exact while synchronous, and its stale steps equal PipeFusion's alone (the
    sequence split changes no number, only where the heads and tokens are computed). A stale step rings each
    patch's whole K, V buffer (xDiT's ring attention over its cache): ``patches`` times a synchronous step's ring
    bytes."""
    import torch

    flags = ["--pipefusion", "2", f"--{inside}", "2", "--patches", "2"]
    warm = _run(tmp_path, "warm", 4, *flags, "--warmup", str(STEPS))
    torch.testing.assert_close(torch.tensor(warm["latent"]), reference, atol=1e-5, rtol=0)
    assert warm["bytes_sent"] == _predicted(f"pipefusion=2,{inside}=2,patches=2", STEPS)
    stale = _run(tmp_path, "stale", 4, *flags, "--warmup", "1")
    assert stale["bytes_sent"] == _predicted(f"pipefusion=2,{inside}=2,patches=2", 1)
    alone = _run(tmp_path, "alone", 2, "--pipefusion", "2", "--patches", "2", "--warmup", "1")
    torch.testing.assert_close(torch.tensor(stale["latent"]), torch.tensor(alone["latent"]), atol=1e-5, rtol=0)
    assert float((torch.tensor(stale["latent"]) - reference).abs().max()) > 1e-3
    if inside == "ring":  # by hand: 3 stale steps ring 2 patches' buffers where a synchronous step rings one
        ring_per_pass = 2 * 32 * HIDDEN * 4 * FP32  # the stage's 1 layer: K and V of the rank's 32 tokens of the
        # whole image, 64 wide, 4 passes, 4 bytes; 1 hop
        assert stale["bytes_sent"][0] - warm["bytes_sent"][0] == 3 * (2 - 1) * ring_per_pass


@pytest.mark.parametrize("parallel", ["ulysses=2", "tp=2"])
def test_layer_offload_streams_each_layer_once_a_step_with_two_resident(tmp_path: Path, reference,  # type: ignore[no-untyped-def]
                                                                         parallel: str) -> None:
    """Emulated (host and device share this machine's memory): the latent is exact and the bytes copied in are the
    cost model's stream, every block's matrices once a step (by hand: 2 layers x (3 + 1 + 4 + 4 + 6) x 64^2
    parameters x 4 bytes x 4 steps; half of them each under tp=2, the adaLN modulation split too), with never
    more than two layers' weights in place."""
    import torch

    from plait.workloads.dit.model import read_dit
    from plait.workloads.dit.offload import streamed_bytes_per_step

    spec, _ = read_dit(Path(__file__).resolve().parents[1] / "examples" / "dit-tiny.toml")
    assert (spec.hidden, spec.layers, spec.mlp_ratio) == (HIDDEN, LAYERS, 4.0)

    key, degree = parallel.split("=")
    result = _run(tmp_path, "offload", 2, f"--{key}", degree, "--offload", "1")
    torch.testing.assert_close(torch.tensor(result["latent"]), reference, atol=1e-5, rtol=0)
    assert result["bytes_sent"] == _predicted(parallel, 1)
    shards = 2 if key == "tp" else 1
    by_hand = LAYERS * 18 * HIDDEN**2 * FP32 * STEPS // shards
    assert result["streamed_bytes"] == [by_hand] * 2 == [STEPS * streamed_bytes_per_step(spec.params(), FP32,
                                                                                          shards)] * 2
    assert result["peak_loaded_layers"] == [2, 2]


@pytest.mark.parametrize("method", ["distrifusion", "pipefusion"])
def test_stale_methods_stay_within_the_bound_and_send_the_predicted_bytes(tmp_path: Path, reference,  # type: ignore[no-untyped-def]
                                                                          method: str) -> None:
    import torch

    flags = ["--distrifusion", "2"] if method == "distrifusion" else ["--pipefusion", "2", "--patches", "2"]
    stale = _run(tmp_path, method, 2, *flags, "--warmup", "1", "--check")
    errors = [pair for rank in stale["attention_errors"] for pair in rank]
    # DistriFusion: each rank's every layer in steps 1..3; PipeFusion: each stage's layer, each of 2 patches
    stale_attentions = 2 * LAYERS * (STEPS - 1) if method == "distrifusion" else LAYERS * 2 * (STEPS - 1)
    assert len(errors) == stale_attentions
    assert all(error <= bound for error, bound in errors)  # stale_attention_bound holds
    assert max(error for error, _ in errors) > 1e-3  # and staleness did change the attention
    latent = torch.tensor(stale["latent"])
    assert 0 < float((latent - reference).norm() / reference.norm()) < 0.05
    parallel = f"{method}=2" + (",patches=2" if method == "pipefusion" else "")
    assert stale["bytes_sent"] == _predicted(parallel, 1)


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["ulysses=2", "distrifusion=2"])
def test_plait_run_denoises_a_dit_file_and_prints_its_bytes_against_the_prediction(parallel: str) -> None:
    """``plait run --model examples/dit-tiny.toml --parallel ...``: torchrun's two ranks, one process beside, each
    rank's bytes against the cost model's; the example's DistriFusion runs stale steps after its warm-up."""
    import re
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "plait", "run", "--model", "examples/dit-tiny.toml", "--parallel",
                           parallel], check=False, cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    text = " ".join(done.stdout.split())
    pairs = re.findall(r"sent ([\d,]+) bytes, predicted ([\d,]+)", text)
    assert len(pairs) == 2 and all(a == b for a, b in pairs)
    difference = float(re.search(r"max \|difference\| ([\d.e+-]+)", text).group(1))  # type: ignore[union-attr]
    if parallel == "ulysses=2":
        assert difference < 1e-5
    else:
        assert "2 of them stale" in text and difference > 1e-4
        assert "8 stale attentions checked against attention over fresh K, V: each within its derived bound" in text


@pytest.mark.parametrize("parallel, rule", [("pipefusion=2,tp=2", "neither xDiT's nor plait's")])
def test_plait_run_refuses_what_only_gpus_run_by_name(parallel: str, rule: str) -> None:
    """Refused before launch in one line naming the plan and the reason."""
    from tests.inprocess import cli

    code, _, err = cli(["run", "--model", "examples/dit-tiny.toml", "--parallel", parallel, "--dry-run"])
    assert code == 2 and f"--parallel {parse_dit_plan(parallel).label()}: " in err and rule in err


@pytest.mark.parametrize("parallel", ["cfg=2", "ring=2", "tp=2", "pipefusion=2", "ulysses=2", "distrifusion=2",
                                      "cfg=2,offload=1", "tp=2,offload=1"])
def test_plait_run_accepts_every_two_rank_plan_of_the_example(parallel: str) -> None:
    from tests.inprocess import cli

    code, out, err = cli(["run", "--model", "examples/dit-tiny.toml", "--parallel", parallel, "--dry-run"])
    assert code == 0, err
    assert f"{parse_dit_plan(parallel).label()} on 2 gloo ranks" in " ".join(out.split())


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_every_plan_the_planner_can_rank_for_the_example_runs(gpus: int) -> None:
    """No third outcome: each candidate the DiT search enumerates and the model takes is accepted by
    ``plait run`` (the 2- and 4-rank ones run in the tests above)."""
    from plait.errors import ConfigError
    from plait.workloads import load
    from plait.workloads.dit.cost import check_plan
    from plait.workloads.dit.predict import candidate_plans
    from plait.workloads.dit.run import runnable_plan

    spec, job = load(str(Path(__file__).resolve().parents[1] / "examples" / "dit-tiny.toml")).description
    taken = 0
    for plan in candidate_plans(gpus, job.cfg, job.image_tokens(spec)):
        try:
            check_plan(spec, job, plan)
        except ConfigError:
            continue
        assert runnable_plan(plan) is plan
        taken += 1
    assert taken >= 10

"""Mixture-of-experts in the runtime: dropless routing against a per-token loop, expert-parallel
layouts against the single-process run (fp32, gloo, spawned ranks), refusals before launch.

The parity cases train examples/tiny-moe.toml for 10 steps and compare every step's loss and
gradient norm with a one-process run (ep = 1) within 1e-5 relative. The gradient norm is the
sharper check: AdamW is invariant to a gradient's scale, so a wrongly scaled expert gradient
barely moves the loss but moves the norm.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from plait.errors import ConfigError
from plait.plan.plan import Plan
from plait.workload.catalog import resolve_model
from tests.ranks import run_ranks

ROOT = Path(__file__).parents[1]
MODEL = ROOT / "examples" / "tiny-moe.toml"
STEPS = 10
CASES = {
    "ep2-ddp": (2, "dp_replicate = 2\nep = 2"),  # expert grads reduced by plait (DDP ignores them)
    "ep2-fsdp-zero3": (2, 'dp_shard = 2\nep = 2\nsharding = "zero3"'),  # experts fully_shard-ed alone
    "ep2-dp4-zero2": (4, 'dp_shard = 4\nep = 2\nsharding = "zero2"'),  # 2 replicas of each expert
}


def write_plan(path: Path, body: str) -> Path:
    path.write_text(f'[job]\nmodel = "{MODEL}"\n[plan]\nglobal_batch = 8\nmicro_batch = 2\n{body}\n')
    return path


def run_metrics(nproc: int, plan: Path, metrics: Path) -> list[tuple[float, float]]:
    out = run_ranks(nproc, ["-m", "plait.run.worker", "--plan", str(plan), "--full-precision", "--steps", str(STEPS),
                            "--metrics", str(metrics)])
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    return [(row["loss"], row["grad_norm"]) for row in rows]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> list[tuple[float, float]]:
    tmp = tmp_path_factory.mktemp("moe-reference")
    return run_metrics(1, write_plan(tmp / "plan.toml", ""), tmp / "m.jsonl")


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_expert_parallel_layout_matches_single_process(name: str, reference, tmp_path: Path) -> None:
    nproc, body = CASES[name]
    got = run_metrics(nproc, write_plan(tmp_path / "plan.toml", body), tmp_path / "m.jsonl")
    assert len(got) == STEPS
    assert [loss for loss, _ in got] == pytest.approx([loss for loss, _ in reference], rel=1e-5)
    assert [norm for _, norm in got] == pytest.approx([norm for _, norm in reference], rel=1e-5)
    assert got[-1][0] < got[0][0]  # it trains


def _block(seed: int = 0):  # type: ignore[no-untyped-def]
    from plait.run.moe import MoeFeedForward

    torch.manual_seed(seed)
    block = MoeFeedForward(resolve_model(str(MODEL)))
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.1)
    return block


def _per_token_reference(block, x_TD: torch.Tensor) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """Shazeer et al. 2017 Eq. 1 token by token: sum over the top-k experts of softmax gate x expert."""
    rows = []
    for x_1D in x_TD.split(1):
        probs_E = torch.softmax(block.router(x_1D)[0], dim=-1)
        gates, experts = probs_E.topk(block.top_k)
        y_1D = sum(g * block.experts[str(int(e))](x_1D) for g, e in zip(gates, experts))
        rows.append(y_1D + block.shared_experts(x_1D))
    return torch.cat(rows)


def _assert_close_normwise(got: torch.Tensor, want: torch.Tensor, rtol: float = 1e-5) -> None:
    """||got - want|| <= rtol ||want||: fp32 sums in another order differ by ~1e-7 of the norm, while single
    elements that cancel can differ by more relative to themselves."""
    assert got.shape == want.shape
    assert float((got - want).detach().norm()) <= rtol * float(want.detach().norm()) + 1e-12


@pytest.mark.parametrize("skewed", [False, True])
def test_moe_block_is_dropless_and_equals_a_per_token_loop(skewed: bool) -> None:
    block = _block()
    x_BSD = torch.randn(2, 16, 64)
    if skewed:  # every token's first choice is expert 0: 32 tokens where capacity 1.0 would keep 32*2/4 = 16
        x_BSD = x_BSD.abs() + 1.0
        with torch.no_grad():
            block.router.weight[0] = 0.1
        chosen = block.router(x_BSD.reshape(-1, 64)).topk(block.top_k).indices
        assert bool((chosen[:, 0] == 0).all())
    y_BSD = block(x_BSD)
    ref_TD = _per_token_reference(block, x_BSD.reshape(-1, 64))
    _assert_close_normwise(y_BSD.reshape(-1, 64), ref_TD)
    grads = torch.autograd.grad(y_BSD.square().sum(), list(block.parameters()))
    ref_grads = torch.autograd.grad(ref_TD.square().sum(), list(block.parameters()), allow_unused=True)
    for got, want in zip(grads, ref_grads, strict=True):  # an expert no token chose: zeros in the block
        _assert_close_normwise(got, torch.zeros_like(got) if want is None else want)


def test_moe_model_has_the_cost_models_parameter_count_and_dense_first_layer() -> None:
    from plait.run.model import FeedForward, build_model
    from plait.run.moe import MoeFeedForward

    spec = resolve_model(str(MODEL))
    model = build_model(spec, spec.seq_len, 0)
    assert sum(p.numel() for p in model.parameters()) == spec.total_params()  # plait.workload.model counts
    kinds = [type(block.feed_forward) for block in model.layers.values()]
    assert kinds == [FeedForward] + [MoeFeedForward] * (spec.num_layers - 1)


@pytest.mark.parametrize(("body", "message"), [
    ({"dp_shard": 2, "ep": 2, "sharding": "zero1"}, "ep=2 with sharding='zero1' is not supported by plait@0.1"),
    ({"tp": 2}, r"tp=2 with a mixture-of-experts model \(tiny-moe\) is not supported by plait@0.1"),
    ({"dp_shard": 2, "ep": 4}, "ep=4 not dividing dp=2 is not supported by plait@0.1"),
])
def test_unsupported_moe_plans_are_refused(body: dict[str, object], message: str) -> None:
    from plait.run.support import check_runnable

    with pytest.raises(ConfigError, match=message):
        check_runnable(Plan(global_batch=8, **body), resolve_model(str(MODEL)), on_gpu=True)  # type: ignore[arg-type]


def test_expert_parallelism_of_a_dense_model_is_refused() -> None:
    from plait.hardware.catalog import get_cluster
    from plait.plan.rules import check_plan

    with pytest.raises(ConfigError, match="ep=2 needs a mixture-of-experts model"):  # a plan rule, before any engine
        check_plan(Plan(dp_shard=2, ep=2, sharding="zero3", global_batch=2),
                   resolve_model(str(ROOT / "examples" / "tiny-model.toml")), get_cluster("dgx-h100-ib"))


def test_plait_run_refuses_an_unsupported_moe_plan_before_launch(tmp_path: Path) -> None:
    plan = write_plan(tmp_path / "plan.toml", 'dp_shard = 2\nep = 2\nsharding = "zero1"')
    out = subprocess.run([sys.executable, "-m", "plait", "run", "--plan", str(plan)], check=False,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    errors = [line for line in out.stderr.splitlines() if line.startswith("plait: error:")]
    assert len(errors) == 1 and errors[0].startswith(
        "plait: error: ep=2 with sharding='zero1' is not supported by plait@0.1: ")
    assert "Traceback" not in out.stderr and "step 1" not in out.stdout + out.stderr

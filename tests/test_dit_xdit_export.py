"""``plait plan --model DIT.toml --export DIR`` writes, for every catalog DiT that xDiT runs, a complete launch line
of the fastest plan xDiT supports for that model: no placeholder, the plan's degrees, as many processes as they
multiply to, checked by xDiT's own argument parser (xfuser's ``FlexibleArgumentParser`` with
``xFuserArgs.add_runner_args`` for its unified runner, ``add_cli_args`` for its example scripts) and against the
runner's registered capabilities when xfuser is installed (it needs diffusers, yunchang and distvae, too heavy for
the test extra: skipped otherwise). A model xDiT does not run is refused in one line."""

from __future__ import annotations

import importlib.util
import json
import math
import shlex
import sys
import types
from pathlib import Path

import pytest

from plait.workloads.dit.xdit import PROMPT
from tests.inprocess import cli

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CASES = [("flux-1-dev-1024px", 8), ("hunyuanvideo-720p", 8), ("pixart-alpha-1024px", 8), ("sana-1600m-4k", 8),
         ("consisid-480p", 6), ("cogvideox-5b-480p", 6)]  # their 17,550 tokens split into no 8 pieces: on 8 GPUs only
# TP plans fit
DEGREES = {"--pipefusion_parallel_degree": "pipefusion", "--ulysses_degree": "ulysses", "--ring_degree": "ring"}


def _export(tmp_path: Path, model: str, gpus: int) -> tuple[list[str], dict[str, int]]:
    code, _, err = cli(["plan", "--model", str(EXAMPLES / f"{model}.toml"), "--gpus", str(gpus), "--export",
                        str(tmp_path)])
    assert code == 0, err
    line = (tmp_path / "xdit_launch.txt").read_text()
    plan = json.loads((tmp_path / "dit_plan.json").read_text())["plan"]
    return shlex.split(line), plan


@pytest.mark.parametrize("model, gpus", CASES)
def test_every_catalog_dit_xdit_runs_exports_a_complete_command(tmp_path: Path, model: str, gpus: int) -> None:
    argv, plan = _export(tmp_path, model, gpus)
    assert not any("<" in a for a in argv) and argv[-2:] == ["--prompt", PROMPT]
    args = argv[1:] if argv[0] == "xdit" else argv[3:]
    if argv[0] != "xdit":
        assert argv[:2] == ["torchrun", f"--nproc_per_node={gpus}"] and argv[2].startswith("examples/")
    degrees = {key: int(args[args.index(flag) + 1]) for flag, key in DEGREES.items()}
    assert degrees == {key: plan[key] for key in degrees}
    cfg = 2 if "--use_cfg_parallel" in args else 1
    assert cfg == plan["cfg"] and cfg * math.prod(degrees.values()) == gpus  # xdit's own count (xfuser/cli.py)
    assert plan["tp"] == plan["distrifusion"] == 1 and not plan["offload"]


@pytest.mark.parametrize("model", ["mochi-1-480p", "dit-xl-2-1024px"])
def test_a_model_xdit_does_not_run_is_refused_in_one_line(tmp_path: Path, model: str) -> None:
    code, _, err = cli(["plan", "--model", str(EXAMPLES / f"{model}.toml"), "--gpus", "8", "--export",
                        str(tmp_path)])
    assert code == 2 and "has no runner model or example script for it" in err and len(err.strip().splitlines()) == 1


def _xfuser():  # type: ignore[no-untyped-def]
    """xfuser's argument module and runner registry. Its ``envs`` asks the machine for an accelerator's version as
    the config module loads, though the argument parser needs none: on a CPU that probe is answered first."""
    spec = importlib.util.find_spec("xfuser")
    if spec is None:
        pytest.skip("xfuser (xDiT) is not installed")
    if "xfuser" not in sys.modules:
        package = types.ModuleType("xfuser")
        package.__path__ = list(spec.submodule_search_locations or [])
        sys.modules["xfuser"] = package
        envs = importlib.import_module("xfuser.envs")
        if envs.get_device_name() == "cpu":
            envs.get_device_version = lambda: "0.0"  # type: ignore[attr-defined]
        del sys.modules["xfuser"]
    args = importlib.import_module("xfuser.config.args")
    importlib.import_module("xfuser.model_executor.models.runner_models")
    base = importlib.import_module("xfuser.model_executor.models.runner_models.base_model")
    return args, base.MODEL_REGISTRY, Path(spec.submodule_search_locations[0]).parent  # type: ignore[index]


@pytest.mark.parametrize("model, gpus", CASES)
def test_xdits_own_parser_reads_the_exported_command(tmp_path: Path, model: str, gpus: int) -> None:
    xargs, registry, site = _xfuser()
    argv, plan = _export(tmp_path, model, gpus)
    parser = xargs.FlexibleArgumentParser()
    if argv[0] == "xdit":
        parsed = xargs.xFuserArgs.add_runner_args(parser).parse_args(argv[1:])
        capabilities = registry[parsed.model].capabilities  # the runner knows the model by this name
        assert all(getattr(capabilities, f"{key}_degree" if key != "pipefusion" else "pipefusion_parallel_degree")
                   for key in ("ulysses", "ring", "pipefusion") if plan[key] > 1)
    else:
        parsed = xargs.xFuserArgs.add_cli_args(parser).parse_args(argv[3:])
        script = (site / argv[2]).read_text()
        assert plan["pipefusion"] == 1 or "does not support PipeFusion" not in script
    assert (parsed.ulysses_degree, parsed.ring_degree, parsed.pipefusion_parallel_degree) == (
        plan["ulysses"], plan["ring"], plan["pipefusion"])
    assert parsed.use_cfg_parallel == (plan["cfg"] == 2)
    if plan["pipefusion"] > 1:
        assert parsed.num_pipeline_patch == plan["patches"]


@pytest.mark.parametrize("parallel, why", [("distrifusion=2", "distrifuser's"), ("tp=2", "no tensor parallelism"),
                                           ("pipefusion=2", "supports no pipefusion")])
def test_a_plan_xdit_does_not_run_for_the_model_is_refused_by_name(parallel: str, why: str) -> None:
    from plait.errors import ConfigError
    from plait.workloads.dit.model import read_dit
    from plait.workloads.dit.predict import parse_dit_plan
    from plait.workloads.dit.xdit import xdit_arguments

    spec, job = read_dit(EXAMPLES / "consisid-480p.toml")  # ConsisID's script refuses PipeFusion
    with pytest.raises(ConfigError, match=why):
        xdit_arguments(spec, job, parse_dit_plan(parallel))

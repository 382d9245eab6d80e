"""Every ``plait`` command shown in README.md and docs/*.md runs as written: each shell block's
``plait ...`` lines are collected, and each runs with exit code 0. Files a command writes go to a temporary folder;
a placeholder (``plan.toml``, ``path/to/config.json ...``, ``plait plan ...``) is filled
with a real file or the block's first command; CUDA-only ones run with ``--dry-run``. The table below must name
every command the docs show, so a new one in the docs needs an entry here."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LLAMA70 = "--model llama3-70b --gpus 64 --global-batch 512"
TITAN_PLAN = '[job]\nmodel = "llama3-8b"\n[plan]\ndp_shard = 2\nsharding = "zero3"\nglobal_batch = 4\n'
HF_CONFIG = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 8,
             "num_attention_heads": 16, "num_key_value_heads": 8, "vocab_size": 32000,
             "max_position_embeddings": 2048, "hidden_act": "silu", "tie_word_embeddings": False}

# documented command -> what the test runs ({tmp}: the test's folder), or why it cannot run here
COMMANDS: dict[str, str] = {
    "plait plan --model llama2-13b --cluster dgx-a100-40gb --gpus 16 --global-batch 256 --seq-len 4096 --engine "
    "megatron-lm@2022": "",
    "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/plait estimate": "SKIP: .ci/run and the "
    "closing notes run the README's first command from a fresh clone (an install does not belong in a test)",
    "plait estimate --model llama3-70b --cluster dgx-h100-ib --gpus 64 --tp 8 --pp 2 --sharding zero1 --recompute "
    "selective --global-batch 512": "",
    "plait estimate --plan examples/llama3-8b-fsdp.toml --json": "",
    "plait estimate --plan examples/llama3-70b-chunks.toml": "",
    "plait plan --model llama3-70b --gpus 64 --global-batch 64 --precision bf16 --seq-len 2048 --engine plait": "",
    "plait estimate --model path/to/config.json ...": "plait estimate --model {tmp}/config.json",
    "plait estimate --cluster examples/my-cluster.yaml --gpus 64": "",
    "plait models": "", "plait clusters": "", "plait engines": "",
    "plait plan --model llama3-8b --cluster h100-2x64-two-regions --gpus 128": "",
    "plait plan --cluster examples/mixed-two-sites.toml --model gpt3-1.3b --global-batch 128": "",
    "plait estimate --cluster a100-h100-ib --global-batch 512": "",
    "plait plan --cluster h100-b200-ib --global-batch 512": "",
    "plait converge --dp-sync local_sgd:every=16 --dp-sync topk:ratio=0.01":
        "plait converge --dp-sync local_sgd:every=16 --dp-sync topk:ratio=0.01 --steps 4",  # 200 steps: minutes
    "plait validate dev": "",
    "plait validate memory": "",
    "plait validate small": "",
    "plait validate torchtitan": "",
    "plait estimate --model plait.workload.zoo:resnet50 --cluster dgx-a100-ib --gpus 64 --global-batch 2048":
        "SKIP: tests/test_traced.py (resnet_estimates) runs it as written, with --json",
    "plait plan --model my_pkg.models:build --input-shape 3,224,224 --gpus 16 --global-batch 4096":
        "plait plan --model plait.workload.zoo:resnet50 --input-shape 3,224,224 --gpus 16 --global-batch 4096",
    "plait plan --model plait.workload.zoo:small_cnn --gpus 2 --global-batch 16 --export cnn/":
        "plait plan --model plait.workload.zoo:small_cnn --gpus 2 --global-batch 16 --export {tmp}/cnn/",
    "plait run --plan examples/crossbow-plan.toml --steps 4": "",
    "plait run --plan examples/small-cnn-plan.toml --steps 5":
        "SKIP: tests/test_traced_run.py::test_plait_run_trains_the_example_plan runs it (3 steps)",
    "plait validate classic":
        "SKIP: tests/test_traced.py::test_classic_data_parallel_rows_are_predicted_or_say_why runs it, with --json",
    "plait estimate --model examples/dlrm-small.toml --gpus 16 --global-batch 65536": "",
    "plait plan --model examples/dlrm-small.toml --gpus 16 --global-batch 65536 --export out/":
        "plait plan --model examples/dlrm-small.toml --gpus 16 --global-batch 65536 --export {tmp}/out4/",
    "plait estimate --model examples/glm-criteo-sparse.toml --gpus 16":
        "SKIP: tests/test_glm.py::test_the_documented_commands_run_in_process runs it as written, in process",
    "plait plan --model examples/glm-criteo-sparse.toml --gpus 16":
        "SKIP: tests/test_glm.py::test_the_documented_commands_run_in_process runs it as written, in process",
    "plait run --model examples/glm-tiny.toml --gpus 2 --steps 200 --cluster calibrated.toml":
        "SKIP: calibrated.toml is plait calibrate's output (see above); tests/test_glm.py::"
        "test_plait_run_equals_one_process_with_the_predicted_bytes runs the entry with --cluster's prediction",
    "plait run --model examples/federated-toy.toml --steps 20 --cluster calibrated.toml":
        "SKIP: calibrated.toml is plait calibrate's output (see above); tests/test_federated.py::"
        "test_both_methods_on_gloo_ranks_equal_one_process_with_the_predicted_bytes runs the entry (run_federated)",
    "plait run --model examples/glm-tiny.toml --gpus 2 --steps 10":
        "SKIP: tests/test_glm.py::test_plait_run_equals_one_process_with_the_predicted_bytes runs it (10 steps)",
    "plait run --model examples/dlrm-tiny.toml --gpus 2 --global-batch 8 --steps 5":
        "SKIP: tests/test_dlrm_kinds.py::test_plait_run_trains_wide_deep_from_its_file runs the same path (plait run "
        "--model with a DLRM-family TOML, torchrun, TorchRec's worker, bytes printed) and tests/test_dlrm_run.py "
        "trains dlrm-tiny.toml on 2 gloo ranks with that worker",
    "plait estimate --model examples/wide-deep-tiny.toml --gpus 2 --global-batch 8": "",
    "plait run --model examples/wide-deep-tiny.toml --gpus 2 --global-batch 8 --steps 3":
        "SKIP: tests/test_dlrm_kinds.py::test_plait_run_trains_wide_deep_from_its_file runs it as written",
    "plait estimate --model examples/graphsage-ogbn-products.toml --gpus 8 --global-batch 8192": "",
    "plait plan --model examples/graphsage-ogbn-products.toml --gpus 8 --global-batch 8192": "",
    "plait estimate --model examples/flux-1-dev-1024px.toml --parallel ulysses=2,ring=2": "",
    "plait plan --model examples/dit-xl-2-1024px.toml --gpus 8": "",
    "plait validate dit": "",
    "plait simulate --model examples/dit-xl-2-1024px.toml --parallel pipefusion=4,patches=8 --trace dit.json":
        "plait simulate --model examples/dit-xl-2-1024px.toml --parallel pipefusion=4,patches=8 --trace {tmp}/dit.json",
    "plait validate gnn": "",
    "plait validate dlrm": "",
    "plait run --model examples/gnn-tiny.toml --gpus 2 --global-batch 64 --steps 3":
        "SKIP: tests/test_gnn_run.py::test_plait_run_trains_a_gnn_file_as_one_process_would runs it as written",
    "plait estimate --model examples/graphsage-ogbn-products.toml --gpus 8 --global-batch 8192 --gnn-sampler "
    "matrix:bulk=8,adjacency=partitioned": "",
    "plait run --model examples/gnn-tiny.toml --gpus 2 --global-batch 64 --steps 4 --gnn-strategy llcg": "",
    "plait run --model examples/gnn-tiny.toml --gpus 2 --global-batch 64 --steps 3 --gnn-strategy full_graph": "",
    "plait run --model examples/dit-tiny.toml --parallel ulysses=2":
        "SKIP: tests/test_dit_run.py::test_plait_run_denoises_a_dit_file_and_prints_its_bytes_against_the_prediction runs it "
        "as written",
    "plait run --model examples/dit-tiny.toml --parallel distrifusion=2":
        "SKIP: tests/test_dit_run.py::test_plait_run_denoises_a_dit_file_and_prints_its_bytes_against_the_prediction runs it "
        "as written",
    "plait plan --model examples/pixart-alpha-1024px.toml --gpus 8 --export out/":
        "plait plan --model examples/pixart-alpha-1024px.toml --gpus 8 --export {tmp}/out/",
    "plait plan --model llama3-70b --gpus 64 --global-batch 512 --rank-by p90": "",
    f"plait plan {LLAMA70} --export out/": f"plait plan {LLAMA70} --export {{tmp}}/out/",
    f"plait plan {LLAMA70} --engine torchtitan": "",
    "plait plan --model llama3-70b --objective cost --gpus-range 1024:8192 --tokens 15e12 --deadline-days 60 "
    "--global-batch 2048": "",
    "plait plan --model llama3-70b --cluster dgx-h100-ib --gpus 64 --global-batch 512": "",
    "plait estimate --model llama3-8b --gpus 8": "",
    "plait estimate --plan examples/llama3-70b-tp2d.toml": "",
    "plait run --plan examples/tiny-tp2d.toml --steps 4":
        "SKIP: tests/test_tp2d.py trains this grid on 4 gloo ranks against one process (its one spawning test)",
    "plait plan --model llama3-8b --cluster dgx-h100-ib --gpus 16 --global-batch 16 --allow-tp-across-nodes "
    "--engine plait": "",
    "plait plan --model llama3-8b --cluster aws-g5-24xlarge --gpus 16 --global-batch 16 --allow-tp-across-nodes "
    "--tp-grids": "",
    "plait plan --model llama3-70b --objective energy --gpus-range 1024:2048 --tokens 15e12 --global-batch 2048": "",
    "plait estimate --model llama3.1-405b --cluster h100-roce-400 --gpus 16384 --tp 8 --pp 16 --schedule interleaved "
    "--vpp 7 --sp --sharding zero1 --recompute selective --global-batch 2048 --tokens 15.6e12": "",
    "plait plan ... --json": f"plait plan {LLAMA70} --json",
    "plait plan ... --export out/": f"plait plan {LLAMA70} --export {{tmp}}/out2/",
    "plait plan ... --engine torchtitan --export out/": f"plait plan {LLAMA70} --engine torchtitan --export {{tmp}}/out3/",
    "plait estimate --model gpt3-1.3b --cluster dgx-a100-ib --gpus 16 --sharding none --global-batch 512 --backend "
    "gloo": "",
    "plait calibrate --backends": "SKIP: 40-90 s of 2-rank gloo and MPI sweeps; tests/test_backends.py times MPI's "
    "all-reduce on 2 ranks (slow, skipped without mpi4py) and checks the fit",
    "plait calibrate --output calibrated.toml": "SKIP: takes about 80 s on this machine; tests/test_runtime.py "
    "runs it with --quick (test_calibrate_writes_a_description_the_estimator_reads)",
    "plait run --plan examples/tiny-plan.toml --cluster calibrated.toml --steps 20":
        "plait run --plan examples/tiny-plan.toml --cluster dgx-h100-ib --steps 5",  # calibrated.toml: see above; 5 steps keep it short
    "plait run --plan plan.toml --dry-run": "plait run --plan examples/tiny-plan.toml --dry-run",
    "plait run --plan examples/tiny-tp2-chunks.toml --steps 3": "SKIP: about 40 s of 2 ranks here; "
    "tests/test_chunked_overlap.py trains this plan whole and chunked in the ranks it already starts",
    "plait run --plan examples/tiny-plan.toml --batch-split 6,2 --slowdown 1,3 --steps 3": "",
    "plait plan --cluster a100-h100-ib --gpus 2 --model examples/tiny-model.toml --global-batch 16 --export mixed":
        "plait plan --cluster a100-h100-ib --gpus 2 --model examples/tiny-model.toml --global-batch 16 --export {tmp}/mixed",
    "plait run --plan examples/mixed-plan.toml --steps 4":
        "SKIP: tests/test_mixed_run.py exports a mixed plan and runs it (2 ranks, slowed)",
    "plait run --plan plan.toml --nodes 2": "plait run --plan examples/tiny-plan.toml --nodes 2",
    "plait run --plan plan.toml --engine torchtitan": "plait run --plan {tmp}/titan.toml --engine torchtitan --dry-run",
    "plait simulate --plan examples/llama3-70b-pp.toml --trace step.json --png step.png":
        "SKIP: tests/test_report.py::test_simulate_cli_writes_trace_and_png runs it as written (files in its folder)",
    "plait run --plan examples/tiny-plan.toml --trace-dir traces/":
        "plait run --plan examples/tiny-plan.toml --steps 3 --trace-dir {tmp}/traces/",
    "plait schedule --trace examples/traces/pai-like.csv --cluster dgx-h100-ib --policy srtf": "",
    "plait schedule --trace examples/traces/pai-like.csv --cluster a100-omnipath --policy all": "",
    "plait estimate --model examples/federated-toy.toml": "",
    "plait plan --model examples/federated-toy.toml": "",
    "plait run --model examples/federated-toy.toml --steps 20":
        "SKIP: tests/test_federated.py::test_both_methods_on_gloo_ranks_equal_one_process_with_the_predicted_bytes "
        "runs its entry (run_federated) on 2 client ranks for 3 rounds",
    "plait schedule --synthetic helios --jobs 2000 --gpus 1024 --cluster dgx-h100-ib --policy crossover": "",
    "plait report --plan examples/llama3-70b-pp.toml --out report.html --gpus-range 32:256":
        "SKIP: tests/test_report.py's report fixture runs it as written (its page in a temporary folder)",
    "plait design --model llama3-8b --gpus 64 --global-batch 256 --tokens 1e12 --vary peak=1,1.5 --vary hbm_gib=1,1.5 "
    "--deadline-days 30":  # 11 planner searches (~4 s of CPU): the same command on the tiny model
        "plait design --model examples/tiny-model.toml --gpus 8 --global-batch 64 --tokens 1e9 --vary peak=1,1.5 "
        "--vary hbm_gib=1,1.5 --deadline-days 30",
    "plait estimate --model gpt3-1.3b --cluster dgx-a100-ib --gpus 8 --dp-replicate 8 --micro-batch 4 --global-batch 64 "
    "--what-if kitsune": "",
}


SHELL_FENCES = ("", "bash", "sh", "console")


def shell_blocks(text: str) -> list[str]:
    """The bodies of a Markdown file's shell code blocks, fences paired in order (a ```text block's closing fence is
    not taken for the opening of the next block)."""
    blocks, body, language = [], [], None
    for line in text.splitlines(keepends=True):
        fence = line.strip()
        if language is None and fence.startswith("```"):
            language, body = fence[3:].strip(), []
        elif language is not None and fence == "```":
            if language in SHELL_FENCES:
                blocks.append("".join(body))
            language = None
        elif language is not None:
            body.append(line)
    return blocks


def documented() -> set[str]:
    """Every ``plait`` command in a shell block of the docs, continuation lines joined, comments dropped."""
    found = set()
    for path in DOCS:
        for block in shell_blocks(path.read_text(encoding="utf-8")):
            for line in block.replace("\\\n", " ").splitlines():
                line = re.sub(r"\s+#.*$", "", line.strip())
                if line.startswith(("plait ", "python3 -m venv")):
                    found.add(" ".join(line.split()))
    return found


def test_the_table_names_every_documented_command() -> None:
    assert documented() == set(COMMANDS)


# Base install only: README's first command installs plait's base dependencies, no optional extra. A subprocess whose
# sys.meta_path refuses every module the extras bring (a sitecustomize on PYTHONPATH) stands in for that
# environment, so that the test gives the same answer with or without PyTorch installed.
EXTRA_MODULES = ("torch", "torchrec", "fbgemm_gpu", "transformers", "torch_geometric", "torchao", "torchtitan",
                 "torchvision", "triton")
BLOCKER = f'''import sys

class _BaseInstallOnly:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {EXTRA_MODULES!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _BaseInstallOnly())
'''


def readme_commands() -> list[str]:
    """The ``plait`` commands of README.md's shell blocks, in order (as :func:`documented` collects them)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = []
    for block in shell_blocks(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line.strip())
            if line.startswith("plait "):
                found.append(" ".join(line.split()))
    return found


def _extras_install_lines() -> dict[str, str]:
    """pyproject.toml's optional extras (read from the file, not from plait): extra -> its ``.[extra]`` spelling."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    return {name: f'pip install -e ".[{name}]"' for name in extras}


# the quick tier keeps the commands that reach an optional extra (the one-line message is what this test is about);
# the rest start a process each and answer from the base install like the rest of the suite checks in-process
_NEEDS_EXTRA = ("plait run ", "plait converge", "plait calibrate", "zoo:", "my_pkg", "validate --classic",
                "validate classic", "--export")
BASE_ONLY = [pytest.param(c, marks=[] if any(k in c for k in _NEEDS_EXTRA) else [pytest.mark.slow])
             for c in dict.fromkeys(readme_commands())]
BASE_SUCCEEDS = frozenset(c for c in readme_commands() if not any(k in c for k in _NEEDS_EXTRA))
"""README commands that reach no optional extra: on the base install they must succeed (exit 0)."""


@pytest.mark.parametrize("command", BASE_ONLY)
def test_readme_command_works_or_names_its_extra_on_the_base_install(command: str, tmp_path: Path) -> None:
    """Every README command, with only the base install: it succeeds, or prints one line naming the extra that
    pyproject.toml declares for it and exits 2 (never a traceback, never "a rank failed")."""
    blocker = tmp_path / "site"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    (tmp_path / "config.json").write_text(json.dumps(HF_CONFIG))
    how = COMMANDS.get(command, "")
    argv = shlex.split((command if how.startswith("SKIP") or not how else how).format(tmp=tmp_path))
    argv = [f"{tmp_path}/{a}" if a.endswith(("out/", ".json", ".png", ".html")) and "/" not in a.rstrip("/")
            else a for a in argv]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), str(ROOT / "src")])}
    out = subprocess.run([sys.executable, "-m", "plait", *argv[1:]], cwd=ROOT, capture_output=True, text=True,
                         timeout=600, env=env)
    assert "Traceback" not in out.stderr + out.stdout, f"{command}\n{out.stderr[-2000:]}"
    if out.returncode == 0:
        return
    assert command not in BASE_SUCCEEDS, f"{command}: exit {out.returncode}\n{out.stderr[-2000:]}"
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, f"{command}: exit {out.returncode}\n{out.stderr[-2000:]}"
    installs = [line for line in _extras_install_lines().values() if line in lines[0]]
    assert lines[0].startswith("plait: error: ") and " needs " in lines[0] and installs, f"{command}: {lines[0]}"


RUNNABLE = [c for c, how in COMMANDS.items() if not how.startswith("SKIP") and c not in BASE_SUCCEEDS]
"""Documented commands run here; a README command that needs no extra is run (and must succeed) by
:func:`test_readme_command_works_or_names_its_extra_on_the_base_install`, the same command line in its own process."""


@pytest.mark.slow
@pytest.mark.parametrize("command", RUNNABLE)
def test_documented_command_runs(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In this process (:func:`tests.inprocess.cli`, the console script's own code path), which spares each command
    an interpreter start and plait's imports (~0.35 s of CPU each, ~80 commands; ``plait run`` still starts torchrun
    and its ranks as processes). An exception escaping the command fails the test with its traceback."""
    from tests.inprocess import cli

    if " run " in f" {command} ":
        pytest.importorskip("torch")
    (tmp_path / "config.json").write_text(json.dumps(HF_CONFIG))
    (tmp_path / "titan.toml").write_text(TITAN_PLAN)
    argv = shlex.split((COMMANDS[command] or command).format(tmp=tmp_path))
    assert argv[0] == "plait"
    monkeypatch.chdir(ROOT)
    code, _, stderr = cli(argv[1:])
    assert code == 0, f"{command}\n{stderr[-2000:]}"
    assert "Traceback" not in stderr

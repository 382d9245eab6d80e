"""``plait run --engine torchtitan``: the command it launches is what torchtitan's own config machinery accepts,
with local assets torchtitan can read, and a machine or plan torchtitan cannot run is refused before launch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from plait.plan.plan import Plan
from plait.run.torchtitan import launch_command, trainer_args, write_assets
from plait.workload.catalog import get_model

pytest.importorskip("torch")


def _torchtitan_manager():  # type: ignore[no-untyped-def]
    if importlib_missing("torchtitan"):
        if os.environ.get("PLAIT_REQUIRE_TORCHTITAN"):
            pytest.fail("torchtitan must be installed for this check (PLAIT_REQUIRE_TORCHTITAN is set)")
        pytest.skip("torchtitan is not installed")
    from torchtitan.config.manager import ConfigManager

    return ConfigManager()


def importlib_missing(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is None


def test_launch_command_parses_with_torchtitan_and_its_assets_load(tmp_path: Path) -> None:
    manager = _torchtitan_manager()
    plan = Plan(tp=2, sp=True, dp_shard=4, sharding="zero3", global_batch=16, micro_batch=2, seq_len=1024)
    tokenizer_dir, data_dir = write_assets(tmp_path)
    args = trainer_args(plan, "llama3-8b", get_model("llama3-8b"), tokenizer_dir, data_dir, tmp_path / "out", 7)
    command = launch_command(plan.num_gpus, args)
    assert command[command.index("-m", 3) + 1] == "torchtitan.train" and "--nproc-per-node=8" in command
    config = manager.parse_args(args)
    assert config.training.steps == 7 and config.hf_assets_path == str(tokenizer_dir)
    assert config.dataloader.dataset_path == str(data_dir) and config.dump_folder == str(tmp_path / "out")
    assert config.parallelism.tensor_parallel_degree == 2 and config.parallelism.data_parallel_shard_degree == 4

    from datasets import load_dataset
    from torchtitan.components.tokenizer import HuggingFaceTokenizer

    tokenizer = HuggingFaceTokenizer(tokenizer_path=str(tokenizer_dir))
    ids = tokenizer.encode("plait", add_bos=True, add_eos=True)
    assert tokenizer.decode(ids[1:-1]) == "plait" and len(ids) == 7
    assert len(load_dataset(str(data_dir), split="train")) > 10


def test_torchtitan_is_refused_before_launch_on_this_cpu(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text('[job]\nmodel = "llama3-8b"\n[plan]\ndp_shard = 2\nsharding = "zero3"\nglobal_batch = 4\n')
    out = subprocess.run([sys.executable, "-m", "plait", "run", "--plan", str(plan), "--engine", "torchtitan"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1 and "torchtitan's trainer runs on CUDA" in out.stderr
    zero1 = tmp_path / "zero1.toml"
    zero1.write_text('[job]\nmodel = "llama3-8b"\n[plan]\ndp_shard = 2\nsharding = "zero1"\nglobal_batch = 4\n')
    out = subprocess.run([sys.executable, "-m", "plait", "run", "--plan", str(zero1), "--engine", "torchtitan"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "sharding='zero1' is not supported by torchtitan@0.3.0" in out.stderr

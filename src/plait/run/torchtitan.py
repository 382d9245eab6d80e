"""``plait run --engine torchtitan``: launch the ``torchtitan`` package from PyPI with plait's exported configuration.

torchtitan's trainer reads a tokenizer from ``hf_assets_path`` (``tokenizer.json`` + ``tokenizer_config.json``,
torchtitan/components/tokenizer.py) and its ``c4_test`` dataset through ``datasets.load_dataset(path,
split="train")`` (torchtitan/hf_datasets/text_datasets.py); nothing may download here, so both are written
locally: a byte-level tokenizer built with Hugging Face ``tokenizers`` and a JSON-lines corpus of the same CPython
documentation plait's own runtime trains on (:mod:`plait.run.data`). torchtitan's trainer runs on CUDA.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from plait.engine.capability import first_unsupported
from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.export.torchtitan import torchtitan_args
from plait.plan.plan import Plan
from plait.run.launch import local_slots
from plait.workload.model import ModelSpec


def write_assets(folder: Path) -> tuple[Path, Path]:
    """A byte-level tokenizer folder and a one-file JSON-lines dataset folder under ``folder``."""
    from pydoc_data.topics import topics

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tokenizer_dir, data_dir = folder / "tokenizer", folder / "data"
    tokenizer_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {symbol: i for i, symbol in enumerate(sorted(alphabet))}
    vocab.update({"<|begin_of_text|>": len(vocab), "<|end_of_text|>": len(vocab) + 1})
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.save(str(tokenizer_dir / "tokenizer.json"))
    (tokenizer_dir / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}), encoding="utf-8")
    with (data_dir / "train.json").open("w", encoding="utf-8") as handle:
        for key in sorted(topics):
            handle.write(json.dumps({"text": topics[key]}) + "\n")
    return tokenizer_dir, data_dir


def trainer_args(plan: Plan, model_slug: str, model: ModelSpec, tokenizer_dir: Path, data_dir: Path,
                 dump_folder: Path, steps: int) -> list[str]:
    """Arguments of ``-m torchtitan.train``: plait's export plus the local assets, step count and output folder."""
    args, _ = torchtitan_args(plan, model_slug, model)
    subcommand = args.pop()  # activation-checkpoint:<mode> is a tyro subcommand: every flag goes before it
    assert subcommand.startswith("activation-checkpoint:")
    return [*args, "--hf-assets-path", str(tokenizer_dir), "--dataloader.dataset-path", str(data_dir),
            "--training.steps", str(steps), "--dump-folder", str(dump_folder), subcommand]


def launch_command(nproc: int, args: list[str]) -> list[str]:
    """torchrun on this node for ``nproc`` GPUs."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "torchtitan.train", *args]


def describe(command: list[str]) -> str:
    """The command as one shell line."""
    return " ".join(shlex.quote(part) for part in command)


def launch_torchtitan(model_slug: str, model: ModelSpec, plan: Plan, steps: int, out: Path | None, dry_run: bool,
                      say: Callable[[str], None]) -> int:
    """Refuse what torchtitan or this machine cannot run, before anything starts; then say the command and launch
    torchtitan; returns its exit code (0 for a dry run). ``plan`` has its sequence length filled
    (:func:`plait.run.plan_run.run_plan` fills it once)."""
    assert plan.seq_len > 0, "the caller fills the plan's sequence length"
    slots = local_slots()
    refusal = first_unsupported(plan, model, get_engine("torchtitan"),
                                "cuda" if slots else "cpu")
    if refusal:
        raise ConfigError(refusal)
    if slots is None and not dry_run:
        raise ConfigError("engine=torchtitan: torchtitan's trainer runs on CUDA (torchtitan/trainer.py); "
                          "this machine has no GPU (use --engine plait, or --dry-run to see the command)")
    if slots is not None and plan.num_gpus > slots:
        raise ConfigError(f"the plan needs {plan.num_gpus} GPUs but this node has {slots}")
    folder = out or Path(tempfile.mkdtemp(prefix="plait-torchtitan-"))
    try:
        tokenizer_dir, data_dir = write_assets(folder)
    except OSError as exc:
        raise ConfigError(f"--out {str(folder)!r} must be a folder plait can write torchtitan's assets into "
                          f"({exc.strerror})") from exc
    command = launch_command(plan.num_gpus, trainer_args(plan, model_slug, model,
                                                         tokenizer_dir, data_dir, folder / "outputs", steps))
    say(describe(command))
    if slots is None:
        say("dry run: torchtitan's trainer needs CUDA, which this machine lacks; the command above is what a GPU node "
            "runs")
    return 0 if dry_run else subprocess.run(command, check=False).returncode

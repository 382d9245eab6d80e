"""Property-based fuzz of the command line: random and hostile arguments and files.

Hypothesis drives ``plait estimate``, ``plan``, ``simulate``, ``report``, ``validate``, ``schedule`` and ``run --dry-run``
in this process (:func:`plait.cli.main.run_cli`, the console script's own code path) with option values
drawn from valid and hostile ones (non-numeric, NaN/inf, zero, negative, past 64 bits, unicode, empty) and
with files that are valid, mutated (a key's value replaced by a hostile one, a key dropped, an unknown key
added), truncated, binary, empty, directories or missing. Every outcome must be one of:

- success, exit code 0 (with ``--json``: strict JSON, no ``NaN``/``Infinity``);
- ``plait plan`` finding no plan that fits: exit code 1 and its explanation;
- a user error: exit code 2 and exactly one line ``plait: error: ...`` on stderr.

An exception escaping ``run_cli`` is a traceback, and fails the test (hypothesis then shrinks the command line).
The example counts give at least 10,000 invocations (six estimates per example), all in the slow tier (the quick
tier's fuzz is the enumerated sweep of ``tests/test_fuzz_hostile.py``); ``PLAIT_FUZZ_SCALE=10`` runs ten times as
many. The runs are derandomized so CI is reproducible; ``PLAIT_FUZZ_SEED=<n>`` draws another
deterministic sample.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import json
import math
import os
import random
import re
import tomllib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
import yaml
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from plait.cli.main import run_cli
from tests.conftest import toy_cluster_mapping
from tests.hostile import VALIDATORS
from tests.test_inputs import LLAMA3_8B_CONFIG, MIXTRAL_CONFIG

pytestmark = pytest.mark.fuzz

ROOT = Path(__file__).resolve().parents[1]
SCALE = float(os.environ.get("PLAIT_FUZZ_SCALE", "1"))
SEED = int(os.environ.get("PLAIT_FUZZ_SEED", "0"))
ESTIMATES_PER_EXAMPLE = 6
OUTCOMES: Counter[str] = Counter()
"""Per command: invocations and first words of every distinct error (printed at the end with ``pytest -s``)."""


def fuzz(examples: int):  # type: ignore[no-untyped-def]
    """Hypothesis settings for ``examples`` invocations (times ``PLAIT_FUZZ_SCALE``), seeded by ``PLAIT_FUZZ_SEED``."""
    def wrap(test):  # type: ignore[no-untyped-def]
        test = settings(max_examples=max(1, int(examples * SCALE)), deadline=None, database=None,
                        derandomize=not SEED, suppress_health_check=list(HealthCheck), print_blob=True)(test)
        return seed(SEED)(test) if SEED else test
    return wrap


def _reject(constant: str) -> None:
    raise AssertionError(f"--json printed {constant}, which is not JSON")


def invoke(argv: list[str]) -> tuple[int, str, str]:
    """Run one command line in this process; check its outcome against the three allowed ones."""
    try:
        return _checked(argv)
    except Exception as exc:  # a traceback or a broken rule: say what caused it (hypothesis shrinks it first)
        exc.add_note(f"plait {' '.join(map(repr, argv))}")
        for arg in argv:
            if os.path.isfile(arg) and "fuzz" in arg:
                exc.add_note(f"{arg}: {Path(arg).read_bytes()[:600]!r}")
        raise


def _checked(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_cli(argv)
    stdout, stderr = out.getvalue(), err.getvalue()
    assert "Traceback" not in stderr + stdout, stderr
    command = argv[0]
    OUTCOMES[command] += 1
    if code == 0:
        if "--json" in argv and "--help" not in argv:
            json.loads(stdout, parse_constant=_reject)
    elif code == 1:  # plan: the search found no plan that fits, and says why
        assert command == "plan", stderr
        if "--json" in argv:
            assert json.loads(stdout, parse_constant=_reject)["top"] == [], stdout[-300:]
        else:
            assert "no plan fits" in stdout + stderr, (stdout[-300:], stderr)
    else:
        assert code == 2, (code, stderr)
        lines = stderr.strip("\n").splitlines()
        assert len(lines) == 1 and lines[0].startswith("plait: error: "), stderr
        OUTCOMES[f"{command}: {_shape(lines[0])}"] += 1
    return code, stdout, stderr


def _shape(error: str) -> str:
    """An error message with its quoted values and numbers blanked: one key per kind of error."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", error.removeprefix("plait: error: "))
    text = re.sub(r"/\S+", "PATH", text)
    return re.sub(r"-?\d[\d.,e+_]*", "N", text)[:90]


# --- hostile values -------------------------------------------------------------------------------------------
HOSTILE_NUMBERS = ["0", "-1", "-8", str(2**63), str(2**64 + 1), str(10**40), "1e3", "1e400", "nan", "inf", "-inf",
                   "x", "", " ", "١٢", "0x10", "1_000", "8.0", "--json", "3.5", "-0"]
HOSTILE_TEXT = ["", " ", "ü", "名前", "../..", "/", "a" * 300, "--help", "-", "nan", "[x]", "a=b", "@", "\t"]
HOSTILE_VALUES: list[Any] = [math.nan, math.inf, -math.inf, -1, 0, 2**70, -(2**70), "", "ü", [1, 2], {}, True, None,
                             1e308, "nan", 0.5, 3, "zero3", [], {"value": math.nan, "source": "x"}]


@functools.cache  # one strategy per value list: hypothesis validates a new strategy object at each draw
def ints(*good: int) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from([str(g) for g in good]), st.integers(-4, 300).map(str),
                     st.sampled_from(HOSTILE_NUMBERS))


@functools.cache
def floats(*good: str) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(list(good)), st.floats(allow_nan=True, allow_infinity=True).map(repr),
                     st.sampled_from(HOSTILE_NUMBERS))


ANY_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=10)
"""``st.text(max_size=10)``'s strings, drawn alike: its default alphabet is what UTF-8 encodes, every code point but
the surrogates (category Cs). Named by category, hypothesis reads Unicode's table instead of encoding all 1.1M code
points once per process on a fresh checkout (4-9 s loaded, measured by timing both in a new process; the same
500 derandomized examples came out of both)."""


@functools.cache
def texts(*good: str) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(list(good)), st.sampled_from(HOSTILE_TEXT), ANY_TEXT)


def _mutate(tree: Any, rnd: random.Random) -> Any:
    """``tree`` (nested dicts/lists) with one hostile change: a value replaced, a key dropped or one added."""
    tree = json.loads(json.dumps(tree))
    node, path = tree, []
    while isinstance(node, (dict, list)) and node and rnd.random() < 0.7:
        key = rnd.choice(list(node)) if isinstance(node, dict) else rnd.randrange(len(node))
        path.append((node, key))
        node = node[key]
    if not path:
        return rnd.choice(HOSTILE_VALUES) if rnd.random() < 0.2 else {**tree, "unknown_key": 1}
    parent, key = path[-1]
    roll = rnd.random()
    if roll < 0.7:
        parent[key] = rnd.choice(HOSTILE_VALUES)
    elif roll < 0.85 and isinstance(parent, dict):
        del parent[key]
    elif isinstance(parent, dict):
        parent[f"{key}_unknown"] = rnd.choice(HOSTILE_VALUES)
    return tree


def _serialize(tree: Any, suffix: str, rnd: random.Random) -> bytes:
    try:
        if suffix == ".toml":
            text = tomli_w.dumps(tree if isinstance(tree, dict) else {"value": tree})
        elif suffix in (".yaml", ".yml"):
            text = yaml.safe_dump(tree)
        else:
            text = json.dumps(tree)
    except (TypeError, ValueError):  # TOML has no null: JSON text in a TOML file is one more malformed file
        text = json.dumps(tree)
    data = text.encode()
    if rnd.random() < 0.1:
        data = data[: rnd.randrange(len(data) + 1)]  # truncated
    return data


class Files:
    """Valid, mutated and broken input files in one folder, made on demand."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.count = folder, 0
        plan = tomllib.loads((ROOT / "examples" / "llama3-8b-fsdp.toml").read_text())
        pipeline = tomllib.loads((ROOT / "examples" / "llama3-70b-pp.toml").read_text())
        cluster = toy_cluster_mapping()
        self.bases: dict[str, tuple[str, Any]] = {
            "plan": (".toml", plan), "pipeline": (".toml", pipeline), "cluster": (".yaml", cluster),
            "cluster-toml": (".toml", {**cluster, "accelerator": "h100-sxm-80gb"}),
            "config": (".json", LLAMA3_8B_CONFIG), "moe-config": (".json", MIXTRAL_CONFIG),
            "model-toml": (".toml", tomllib.loads((ROOT / "examples" / "tiny-model.toml").read_text())),
        }
        self.csv_records = {option: list(csv.reader(path.read_text(encoding="utf-8").splitlines()))[:4]
                            for option, path in VALIDATORS.items()}
        self.fixed = self._fixed_files()

    def _fixed_files(self) -> list[str]:
        f = self.folder
        (f / "empty.toml").write_bytes(b"")
        (f / "binary.json").write_bytes(bytes(range(256)) * 4)
        (f / "latin1.yaml").write_bytes("name: caf\xe9".encode("latin-1"))
        (f / "dir.toml").mkdir()
        (f / "config.json").mkdir()
        (f / "dangling.toml").symlink_to(f / "nowhere.toml")
        (f / "ünïcode plan.toml").write_text((ROOT / "examples" / "tiny-plan.toml").read_text())
        (f / "existing.html").write_text("keep me")
        (f / "a_file").write_text("not a folder")
        return [str(f / n) for n in ("empty.toml", "binary.json", "latin1.yaml", "dir.toml", "config.json",
                                     "dangling.toml", "ünïcode plan.toml", "missing.toml", "existing.html",
                                     "a_file/child.toml")] + ["", "-", "/", "/dev/null"]

    def _csv(self, option: str, rnd: random.Random, mutate: bool) -> str:
        """A CSV of ``option``'s validator (``runs``, ``memory``, ...): its first records, and with ``mutate`` a cell
        made hostile, a column dropped or added, a record made longer or shorter, or the file cut short."""
        header, *rows = [list(r) for r in self.csv_records[option]]
        roll = rnd.random() if mutate else 1.0
        column = rnd.randrange(len(header))
        if roll < 0.5:
            rnd.choice(rows)[column] = rnd.choice(["", "nan", "inf", "-1", "0", "x", "ü", str(2**70), '"', "1e300",
                                                   "1.5", "1-x", "1024x", "full-graph"])
        elif roll < 0.65:
            header, rows = header[:column] + header[column + 1:], [r[:column] + r[column + 1:] for r in rows]
        elif roll < 0.75:
            header, rows = [*header, "extra"], [[*r, "1"] for r in rows]
        elif roll < 0.85:
            row = rnd.choice(rows)
            row[:] = [*row, "1"] if rnd.random() < 0.5 else row[:-1]
        out = io.StringIO()
        csv.writer(out).writerows([header, *rows])
        text = out.getvalue()
        if mutate and roll >= 0.85 and rnd.random() < 0.5:
            text = text[: rnd.randrange(len(text) + 1)]  # cut short, inside a quoted cell as often as not
        path = self.folder / f"{option}{self.count}.csv"
        path.write_text(text, encoding="utf-8")
        return str(path)

    def write(self, kind: str, rnd: random.Random, mutate: bool) -> str:
        self.count += 1
        if kind.startswith("csv"):
            return self._csv(kind.removeprefix("csv-") if "-" in kind else "runs", rnd, mutate)
        suffix, tree = self.bases[kind]
        path = self.folder / (f"{kind}{self.count}" + ("/config.json" if suffix == ".json" else suffix))
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(_serialize(_mutate(tree, rnd) if mutate else tree, suffix, rnd))
        return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Files]:
    """The files, in a folder that is also the working directory: what a command writes by default (the report's
    report.html, an export to "-") lands there, never in the checkout."""
    folder = tmp_path_factory.mktemp("fuzz")
    here = os.getcwd()
    os.chdir(folder)
    try:
        yield Files(folder)
    finally:
        os.chdir(here)


def path_of(files: Files, data: st.DataObject, *kinds: str) -> str:
    """A valid file of one of ``kinds`` (40%), a mutated one (40%) or a fixed broken one (20%)."""
    roll = data.draw(st.integers(0, 9))
    rnd = random.Random(data.draw(st.integers(0, 2**32)))
    if roll < 8:
        return files.write(data.draw(st.sampled_from(kinds)), rnd, mutate=roll >= 4)
    return data.draw(st.sampled_from(files.fixed))


@functools.cache
def _subsets(items: tuple[str, ...], most: int) -> st.SearchStrategy[list[str]]:
    return st.lists(st.sampled_from(items), unique=True, max_size=most)


def command_line(data: st.DataObject, command: str, options: dict[str, Any], flags: list[str],
                 required: dict[str, Any] | None = None, most: int = 7) -> list[str]:
    """``command`` with a random subset of ``options`` (name -> strategy of its value or callable drawing one) and
    ``flags``; ``required`` ones are usually present."""
    argv = [command]
    for name, value in (required or {}).items():
        if data.draw(st.integers(0, 19)):
            argv += [name, value() if callable(value) else data.draw(value)]
    names = data.draw(_subsets(tuple(sorted(options)), most)) if options else []
    for name in names:
        value = options[name]
        argv += [name, value() if callable(value) else data.draw(value)]
    argv += data.draw(_subsets(tuple(flags), 3))
    if not data.draw(st.integers(0, 49)):
        argv.insert(data.draw(st.integers(1, len(argv))), data.draw(texts("--bogus", "extra", "--gpus")))
    return argv


MODELS = ("llama3-8b", "llama3-70b", "mixtral-8x7b", "gpt3-1.3b", "deepseek-v3")
CLUSTERS = ("dgx-h100-ib", "dgx-a100-ib")
MIXED_CLUSTERS = ("a100-h100-ib", "v100-a100-ib")
ENGINES = ("megatron-core", "torchtitan", "deepspeed", "plait", "torchtitan@0.3.0", "megatron-core[fp8_recipe=x]")


def model_option(files: Files, data: st.DataObject):  # type: ignore[no-untyped-def]
    return lambda: (data.draw(texts(*MODELS)) if data.draw(st.booleans())
                    else path_of(files, data, "config", "moe-config", "model-toml"))


def cluster_option(files: Files, data: st.DataObject, mixed: bool = False):  # type: ignore[no-untyped-def]
    """A cluster preset or file; with ``mixed``, one draw in eight a mixed preset (its estimates balance shares:
    tens of estimates each)."""
    def draw() -> str:
        if mixed and data.draw(st.integers(0, 7)) == 0:
            return data.draw(texts(*MIXED_CLUSTERS))
        return (data.draw(texts(*CLUSTERS)) if data.draw(st.booleans())
                else path_of(files, data, "cluster", "cluster-toml"))
    return draw


@pytest.mark.slow
@fuzz(7440 // ESTIMATES_PER_EXAMPLE)
@given(data=st.data())
def test_estimate(files: Files, data: st.DataObject) -> None:
    options = {
        "--model": model_option(files, data), "--cluster": cluster_option(files, data, mixed=True),
        "--gpus": ints(1, 8, 16, 64), "--plan": lambda: path_of(files, data, "plan", "pipeline"),
        "--split": texts("data", "pipeline", "x"), "--local-steps": texts("a100=2,h100=4", "a100=0", "x", "h100=1e9"),
        "--shares": texts("a100=128,h100=384", "a100=8+8,h100=8+8", "a100=x", "=", "a100=1,a100=2", "nope=4",
                          "v100=256", "a100=0+0"),
        "--engine": texts(*ENGINES), "--tp": ints(1, 2, 8), "--pp": ints(1, 2, 4), "--vpp": ints(1, 2),
        "--schedule": texts("1f1b", "interleaved", "gpipe", "zb-h1"), "--cp": ints(1, 2), "--ep": ints(1, 2, 8),
        "--dp-replicate": ints(1, 2), "--sharding": texts("none", "zero1", "zero2", "zero3"),
        "--recompute": texts("none", "selective", "full"), "--recompute-layers": ints(-1, 0, 2),
        "--micro-batch": ints(1, 2, 4), "--global-batch": ints(8, 128, 1024), "--seq-len": ints(0, 2048, 8192),
        "--precision": texts("bf16", "fp16", "fp8"), "--train-tokens": floats("1e12", "15e12", "1e3"),
        "--dp-sync": texts("allreduce", "bf16", "powersgd:rank=4", "topk:ratio=0.01", "local_sgd:every=8",
                           "quantize:bits=1", "diloco:every=4", "powersgd:rank=x", "topk", "bf16:rank=2", "local_sgd:every=0"),
        "--what-if": texts("kitsune", "kitsune", "nope"),
    }
    flags = ["--json", "--json", "--sp", "--no-sp", "--offload-optimizer", "--offload-params", "--simulate",
             "--closed-form", "--help"]
    for _ in range(ESTIMATES_PER_EXAMPLE):  # several command lines per example: hypothesis's cost is per example
        argv = command_line(data, "estimate", options, flags)
        if "--json" not in argv and data.draw(st.integers(0, 3)):
            argv.append("--json")  # tables cost 10x the estimate; most invocations take the JSON path
        invoke(argv)


@pytest.mark.slow
@fuzz(700)
@given(data=st.data())
def test_plan(files: Files, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory) -> None:
    options = {
        "--model": model_option(files, data), "--cluster": cluster_option(files, data), "--engine": texts(*ENGINES),
        "--gpus": ints(1, 2, 4), "--gpus-range": texts("1:8", "8:16", "16:8", "0:4", "a:b", f"1:{2**40}", "4"),
        "--global-batch": texts("8", "16,32", "8:32", "0", "-8", "1:0", f"{2**70}", "a,b"),
        "--seq-len": ints(0, 1024), "--objective": texts("throughput", "cost", "time"),
        "--tokens": floats("1e12", "1e9"), "--deadline-days": floats("60", "1"), "--budget-usd": floats("1e6", "1"),
        "--top": ints(1, 3), "--memory-margin": floats("0.05", "0", "0.99", "1"),
        "--precision": texts("bf16", "bf16,fp8", "fp8", ","), "--workers": texts("1", "0", "-1", "x"),
        "--export": lambda: data.draw(st.sampled_from([str(files.folder / f"export{files.count}"), *files.fixed])),
    }
    argv = command_line(data, "plan", options, ["--json", "--force", "--allow-tp-across-nodes"], most=6)
    if "--gpus" not in argv and "--gpus-range" not in argv:
        argv += ["--gpus", data.draw(st.sampled_from(["1", "2", "4"]))]  # the default 8 costs 0.1 s a search
    if "--gpus-range" in argv and "--model" not in argv:
        argv += ["--model", "gpt3-1.3b"]
    invoke(argv)


def _plan_or_output(files: Files, data: st.DataObject, suffix: str):  # type: ignore[no-untyped-def]
    return lambda: data.draw(st.sampled_from([str(files.folder / f"out{files.count}{suffix}"), *files.fixed]))


@pytest.mark.slow
@fuzz(400)
@given(data=st.data())
def test_simulate(files: Files, data: st.DataObject) -> None:
    options = {"--model": model_option(files, data), "--cluster": cluster_option(files, data),
               "--engine": texts(*ENGINES), "--trace": _plan_or_output(files, data, ".json")}
    required = {"--plan": lambda: path_of(files, data, "pipeline", "plan")}
    argv = command_line(data, "simulate", options, ["--json", "--force"], required=required, most=3)
    if data.draw(st.integers(0, 49)) == 0:
        argv += ["--png", _plan_or_output(files, data, ".png")()]  # a picture costs 0.3 s
    invoke(argv)


@pytest.mark.slow
@fuzz(60)
@given(data=st.data())
def test_report(files: Files, data: st.DataObject) -> None:
    options = {"--model": model_option(files, data), "--cluster": cluster_option(files, data),
               "--engine": texts(*ENGINES), "--gpus-range": texts("8:16", "0:4", "x"), "--tokens": floats("1e12"),
               "--out": _plan_or_output(files, data, ".html")}
    required = {"--plan": lambda: path_of(files, data, "pipeline", "plan")}
    invoke(command_line(data, "report", options, ["--force"], required=required, most=3))


@pytest.mark.slow
@fuzz(700)
@given(data=st.data())
def test_validate(files: Files, data: st.DataObject) -> None:
    """Every validator (--runs, --memory, --classic, --gnn, --dit) on its CSV, valid or mutated, or on another's."""
    option = data.draw(st.sampled_from(sorted(VALIDATORS)))
    kind = data.draw(st.sampled_from([f"csv-{option}"] * 3 + [f"csv-{v}" for v in VALIDATORS]))
    required = {f"--{option}": lambda: path_of(files, data, kind)}
    invoke(command_line(data, "validate", {}, ["--json"], required=required))


@pytest.mark.slow
@fuzz(760)
@given(data=st.data())
def test_run_dry(files: Files, data: st.DataObject) -> None:
    options = {
        "--steps": ints(1, 10), "--cluster": cluster_option(files, data),
        "--metrics": _plan_or_output(files, data, ".jsonl"), "--checkpoint-dir": _plan_or_output(files, data, ""),
        "--checkpoint-at": ints(0, 2), "--checkpoint-every": ints(0, 2), "--keep": ints(1, 2),
        "--on-nonfinite": texts("stop", "skip"), "--max-restarts": ints(0, 1), "--engine": texts("plait", "torchtitan"),
        "--trace-dir": _plan_or_output(files, data, ""), "--out": _plan_or_output(files, data, ""),
        "--nodes": texts("2", "4", "0", "-1", "x", str(2**64)),
        "--slowdown": texts("1,3", "1", "0.5,1", "inf,1", "x,y"), "--batch-split": texts("12,4", "8,8", "3,1", "a"),
        "--stage-layers": texts("3,1", "2,2", "4,0", "-1,5"),
    }
    required = {"--plan": lambda: path_of(files, data, "plan", "pipeline")}
    argv = command_line(data, "run", options, ["--resume", "--reshard", "--full-precision"], required=required)
    if "--nodes" not in argv:
        argv += ["--nodes", "2"]  # the torchrun command is printed, not launched: a dry run of one node is 5 s
    invoke([*argv, "--dry-run"])


def _trace_file(files: Files, data: st.DataObject) -> str:
    """A trace CSV: the first rows of a shipped trace, one cell made hostile half the time, or a broken file."""
    if data.draw(st.integers(0, 4)) == 0:
        return path_of(files, data, "csv")  # a runs CSV: the wrong columns
    lines = (ROOT / "examples" / "traces" / "pai-like.csv").read_text().splitlines()[:7]
    rows = [line.split(",") for line in lines[1:]]
    if data.draw(st.booleans()):
        row = data.draw(st.sampled_from(rows))
        row[data.draw(st.integers(0, len(row) - 1))] = data.draw(st.sampled_from(
            ["", "nan", "inf", "-1", "0", "x", "ü", str(2**70), '"', "llama3-405b", "1e30", "4097"]))
    files.count += 1
    path = files.folder / f"trace{files.count}.csv"
    path.write_text("\n".join([lines[0], *(",".join(r) for r in rows)]) + "\n")
    return str(path)


@pytest.mark.slow
@fuzz(300)
@given(data=st.data())
def test_schedule(files: Files, data: st.DataObject) -> None:
    options = {
        "--cluster": cluster_option(files, data), "--gpus": ints(8, 16, 64),
        "--policy": texts("fifo", "srtf", "las", "consolidate", "elastic", "crossover", "all"),
        "--synthetic": texts("philly", "helios", "pai"), "--jobs": ints(1, 5, 20), "--seed": ints(0, 1),
        "--load": floats("1.5", "0.5"), "--trace-out": _plan_or_output(files, data, ".json"),
        "--write-trace": _plan_or_output(files, data, ".csv"),
    }
    required = {"--trace": lambda: _trace_file(files, data)}
    argv = command_line(data, "schedule", options, ["--json", "--force"], required=required, most=4)
    if "--jobs" in argv and "--synthetic" in argv:
        at = argv.index("--jobs") + 1
        argv[at] = argv[at] if argv[at].isdigit() and int(argv[at]) <= 50 else "20"  # a large draw costs seconds
    invoke(argv)


def test_report_outcomes() -> None:
    """Print what the fuzz tests saw (``pytest -s tests/test_fuzz_cli.py``): invocations and distinct errors."""
    commands = {k: v for k, v in OUTCOMES.items() if ":" not in k}
    print(f"\nfuzz: {sum(commands.values())} invocations {dict(commands)}; "
          f"{sum(1 for k in OUTCOMES if ':' in k)} distinct error openings")
    for key, count in sorted(OUTCOMES.items()):
        if ":" in key:
            print(f"  {count:6d}  {key}")
    if len(commands) == 7 and SCALE >= 1:  # the whole module ran
        assert sum(commands.values()) >= 10_000 * SCALE

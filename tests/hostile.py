"""Hostile inputs, enumerated rather than drawn: every integer and number option of every command with values past
64 bits, negative, zero, NaN and infinite; every ``plait validate`` reader with a missing column, an extra column, a
record too long or too short, and a garbage cell in each column; model, cluster and plan files nested deeper than
a parser recurses, with integers of thousands of digits and past 64 bits; over-long file names; the cost and time
objectives' tokens, deadline, budget and GPU range; requests for more work than a command takes. Each command line
runs in this process (the console script's code path) under a time limit and ends in one of:

- ``success``: exit 0, or ``plait plan``'s exit 1 with its explanation of why no plan fits (an answer);
- ``one-line error``: exit 2 and exactly one line ``plait: error: ...`` on stderr;
- ``traceback``: an exception escaped, or any other exit or stderr (a multi-line error);
- ``hang``: still running after :data:`LIMIT_S`;
- ``nonsense``: a success whose ``--json`` is not strict JSON (``NaN`` or ``Infinity``: a figure of no meaning).

``tests/test_fuzz_cli.py`` asserts that no case ends in a traceback or a hang; ``benchmarks/fuzz_inputs.py`` prints
the counts per command and outcome.
"""

from __future__ import annotations

import contextlib
import csv
import io
import itertools
import json
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "src" / "plait" / "validate" / "data"
EXAMPLES = ROOT / "examples"
LIMIT_S = 10.0
"""A command still running after this long is a hang: no input may ask for more work than a few seconds' before it
is refused or answered (the slowest answered case here takes about 3 s on two shared cores)."""
OUTCOMES = ("success", "one-line error", "traceback", "hang", "nonsense")
FAILURES = ("traceback", "hang", "nonsense")
"""The outcomes no case may end in."""

BIG = str(2**64 + 1)
INTEGERS = (BIG, f"-{BIG}", str(10**40), "-1", "0")
"""Past 64 bits either way, far past any count, negative, zero."""
NUMBERS = ("nan", "inf", "-inf", "-1", "0", "1e-300", "1e300")
"""Not a number, infinite, negative, zero, tiny and huge."""
CELLS = ("x", "", "nan", "inf", "-1", "0", str(2**70), "1e300", "1.5", "ü")
"""Garbage for a CSV cell."""

UNTRACED = "batch_per_gpu"
"""The column of ``classic_dp.csv`` whose empty cell stops a row before a model is traced ("the source states no
batch per GPU"): such rows are read and checked but trace no model (every GPU of the file now has a preset system, so
a row of any GPU with a batch traces ResNet-50 or BERT: torch's import and a trace, seconds)."""
VALIDATORS = {"runs": DATA / "dev.csv", "memory": DATA / "memory_runs.csv", "classic": DATA / "classic_dp.csv",
              "gnn": DATA / "gnn_epochs.csv", "dit": DATA / "dit_latency.csv"}
"""Each ``plait validate`` option and the shipped CSV whose records the cases mutate."""


class Hang(BaseException):
    """Raised by the timer in the command's frame (a ``BaseException``: no ``except Exception`` swallows it)."""


@dataclass(frozen=True)
class Case:
    """One command line and the family of hostile input it tries."""

    family: str
    argv: tuple[str, ...]

    @property
    def command(self) -> str:
        return self.argv[0]


@dataclass(frozen=True)
class Outcome:
    """What a case ended in, after how long, with the last line it printed or the exception."""

    case: Case
    outcome: str
    seconds: float
    detail: str


def _alarm(signum: int, frame: object) -> None:
    raise Hang()


def run(case: Case, limit_s: float = LIMIT_S) -> Outcome:
    """Run one case in this process and classify how it ended (module docstring)."""
    from plait.cli.main import run_cli

    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run_cli(list(case.argv))
    except Hang:
        return Outcome(case, "hang", time.perf_counter() - start, f"still running after {limit_s:g} s")
    except Exception as exc:  # noqa: BLE001 - a traceback is what this harness counts
        return Outcome(case, "traceback", time.perf_counter() - start, f"{type(exc).__name__}: {exc}"[:300])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    seconds, stderr = time.perf_counter() - start, err.getvalue()
    lines = stderr.strip("\n").splitlines()
    if code == 0 or (code == 1 and case.command == "plan" and "no plan fits" in out.getvalue() + stderr):
        if code == 0 and "--json" in case.argv and not _strict_json(out.getvalue()):
            return Outcome(case, "nonsense", seconds, f"not strict JSON: {out.getvalue()[:200]!r}")
        return Outcome(case, "success", seconds, (out.getvalue().strip().splitlines() or [""])[-1][:200])
    if code == 2 and len(lines) == 1 and lines[0].startswith("plait: error: "):
        return Outcome(case, "one-line error", seconds, lines[0][:300])
    return Outcome(case, "traceback", seconds, f"exit {code}: {stderr[-300:]!r}")


def _strict_json(text: str) -> bool:
    def refuse(constant: str) -> None:
        raise ValueError(constant)
    try:
        json.loads(text, parse_constant=refuse)
    except ValueError:
        return False
    return True


def table(outcomes: list[Outcome]) -> str:
    """Counts per command and outcome, with a total row, as fixed-width text."""
    counts = Counter((o.case.command, o.outcome) for o in outcomes)
    commands = sorted({o.case.command for o in outcomes})
    head = f"{'command':10s}" + "".join(f"{name:>15s}" for name in (*OUTCOMES, "cases"))
    rows = [head, "-" * len(head)]
    for command in [*commands, "total"]:
        cells = [sum(n for (c, o), n in counts.items() if o == outcome and command in (c, "total"))
                 for outcome in OUTCOMES]
        rows.append(f"{command:10s}" + "".join(f"{n:15d}" for n in (*cells, sum(cells))))
    return "\n".join(rows)


# --- the cases --------------------------------------------------------------------------------------------------
def _base(folder: Path) -> dict[str, list[str]]:
    """Per command, a command line that succeeds, to which one hostile option is added. ``report`` names the tiny
    model, not a plan file: with ``--plan`` the file's layout is read and the layout options (``--gpus``, ``--tp``,
    ...) are not, so their hostile values never reached their checks and each case rendered the same page's two
    plots (about 1 s a case); here each value reaches its check, and the few that are valid render a page."""
    plan = str(EXAMPLES / "tiny-plan.toml")
    return {
        "estimate": ["estimate", "--json"], "plan": ["plan", "--gpus", "8", "--json"],
        "simulate": ["simulate", "--plan", plan, "--json"],
        "report": ["report", "--model", str(EXAMPLES / "tiny-model.toml"), "--gpus", "2",
                   "--out", str(folder / "report.html"), "--force"],
        "schedule": ["schedule", "--synthetic", "philly", "--jobs", "20", "--gpus", "16", "--json"],
        "run": ["run", "--plan", plan, "--dry-run", "--nodes", "2"],
    }


CONTEXT = {
    ("estimate", "--sparse-group"): ["--model", str(EXAMPLES / "dlrm-small.toml"), "--gpus", "8"],
    ("estimate", "--edge-cut"): ["--model", str(EXAMPLES / "gnn-tiny.toml"), "--gpus", "2"],
    ("estimate", "--cache-fraction"): ["--model", str(EXAMPLES / "gnn-tiny.toml"), "--gpus", "2"],
    ("simulate", "--gpus"): ["--model", str(EXAMPLES / "gnn-tiny.toml")],
    ("simulate", "--global-batch"): ["--model", str(EXAMPLES / "gnn-tiny.toml")],
    ("run", "--gpus"): ["--model", str(EXAMPLES / "dlrm-tiny.toml")],
    ("run", "--global-batch"): ["--model", str(EXAMPLES / "dlrm-tiny.toml")],
    ("run", "--cache-fraction"): ["--model", str(EXAMPLES / "gnn-tiny.toml")],
}
"""Options that act only with a kind of model: the model they are tried with (without one they are refused as
foreign options, which would not reach their own checks)."""


def _number_options() -> Iterator[tuple[str, str, str]]:
    """(command, option, ``int`` or ``float``) of every numeric option of the commands in :func:`_base`."""
    from typer.main import get_command

    from plait.cli.main import _register, app

    _register(None)
    group = get_command(app)
    for name in _base(Path("/")):
        for param in group.commands[name].params:  # type: ignore[attr-defined]
            kind = param.type.name
            if param.opts and ("int" in kind or "float" in kind):
                yield name, param.opts[0], "int" if "int" in kind else "float"


def option_cases(folder: Path) -> list[Case]:
    """Every numeric option of every command with :data:`INTEGERS` or :data:`NUMBERS`."""
    base, cases = _base(folder), []
    for command, option, kind in _number_options():
        for value in INTEGERS if kind == "int" else NUMBERS:
            argv = [*base[command], *CONTEXT.get((command, option), []), option, value]
            cases.append(Case(f"{kind} option", tuple(argv)))
    return cases


def _records(path: Path, rows: int = 3, untraced: bool = False) -> tuple[list[str], list[list[str]]]:
    """The header and the first ``rows`` records of ``path``; ``untraced``: of the records no traced model is
    predicted for (``--classic`` rows with no batch per GPU, :data:`UNTRACED`: their cells are read, no model is
    traced)."""
    with path.open(newline="", encoding="utf-8") as handle:
        header, *records = list(csv.reader(handle))
    if untraced:
        records = [r for r in records if not r[header.index(UNTRACED)]]
    return header, records[:rows]


def _write_csv(path: Path, header: list[str], rows: list[list[str]]) -> str:
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([header, *rows])
    return str(path)


def validator_cases(folder: Path, cells: tuple[str, ...] = CELLS, untraced: bool = False) -> list[Case]:
    """Each validator with each column missing, an extra column, records too long and too short, and each of
    ``cells`` in each column of its first record (``untraced``: :func:`_records`)."""
    cases = []
    for option, source in VALIDATORS.items():
        header, rows = _records(source, untraced=untraced and option == "classic")
        names = (folder / f"{option}{n}.csv" for n in itertools.count(1))

        def write(h: list[str], r: list[list[str]], names: Iterator[Path] = names) -> str:
            return _write_csv(next(names), h, r)

        files = [write(header, rows), write([*header, "extra"], [[*r, "1"] for r in rows]),
                 write(header, [[*rows[0], "1"], *rows[1:]]), write(header, [rows[0][:-1], *rows[1:]]),
                 write(header, []), write([], [])]
        for i in range(len(header)):
            files.append(write(header[:i] + header[i + 1:], [r[:i] + r[i + 1:] for r in rows]))
            for cell in cells:
                files.append(write(header, [[*rows[0][:i], cell, *rows[0][i + 1:]], *rows[1:]]))
        cases += [Case("validator CSV", ("validate", f"--{option}", f, "--json")) for f in files]
    return cases


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def file_cases(folder: Path) -> list[Case]:
    """Model, cluster and plan files nested too deeply, with huge integers and numbers past 64 bits."""
    config = json.loads((DATA / "model_configs" / "qwen3-30b-a3b.json").read_text())
    texts: dict[str, str] = {
        "deep.json": _nested(100_000), "deep-field.json": json.dumps({**config, "hidden_size": "@"}).replace(
            '"@"', _nested(5_000)),
        "digits.json": json.dumps({**config, "hidden_size": "@"}).replace('"@"', "9" * 5_000),
        "digits-float.json": json.dumps({**config, "rope_theta": "@"}).replace('"@"', "1" + "0" * 5_000 + ".5"),
        "deep.toml": "a = " + _nested(100_000), "digits.toml": "layers = " + "9" * 5_000,
        "deep.yaml": "a: " + _nested(3_000), "digits.yaml": "name: x\nnodes: " + "9" * 5_000,
    }
    for field, value in (("hidden_size", 2**70), ("num_hidden_layers", 2**40), ("hidden_size", 10**300),
                         ("hidden_size", 1e308), ("max_position_embeddings", 2**62), ("vocab_size", -1),
                         ("num_attention_heads", 0), ("intermediate_size", 10**20)):
        texts[f"{field}-{value:.0e}.json"] = json.dumps({**config, field: value})
    model = (EXAMPLES / "tiny-model.toml").read_text()
    for key, value in (("num_layers", "9" * 40), ("hidden_size", str(2**64)), ("vocab_size", "1e300")):
        texts[f"model-{key}.toml"] = "\n".join(
            f"{key} = {value}" if line.split("=")[0].strip() == key else line for line in model.splitlines())
    plan = (EXAMPLES / "tiny-plan.toml").read_text()
    texts["plan-huge.toml"] = plan.replace("[plan]", f"[plan]\nrecompute_layers = {2**70}", 1)
    cases = []
    for name, text in texts.items():
        (folder / name).write_text(text)
        path = str(folder / name)
        if name.endswith(".yaml"):
            cases.append(Case("model/cluster/plan file", ("estimate", "--cluster", path, "--json")))
        elif name.startswith("plan") or name == "deep.toml":
            cases.append(Case("model/cluster/plan file", ("estimate", "--plan", path, "--json")))
        if not name.endswith(".yaml") and not name.startswith("plan"):
            cases.append(Case("model/cluster/plan file", ("estimate", "--model", path, "--json")))
            cases.append(Case("model/cluster/plan file", ("plan", "--model", path, "--gpus", "8", "--json")))
    return cases


def path_cases(folder: Path) -> list[Case]:
    """Over-long file names (a name past NAME_MAX, a path past PATH_MAX) in every option that takes a file."""
    names = ("a" * 5_000 + ".toml", "x/" * 3_000 + "config.json", "b" * 300 + ".yaml", "c" * 300 + ".csv")
    plan = str(EXAMPLES / "tiny-plan.toml")
    cases = []
    for name in names:
        path = str(folder / name)
        for argv in (("estimate", "--model", path), ("estimate", "--cluster", path), ("estimate", "--plan", path),
                     ("plan", "--model", path), ("plan", "--export", path), ("simulate", "--plan", path),
                     ("simulate", "--plan", plan, "--trace", path), ("report", "--plan", plan, "--out", path),
                     ("validate", "--runs", path), ("validate", "--classic", path), ("validate", "--memory", path),
                     ("schedule", "--trace", path), ("run", "--plan", path, "--dry-run")):
            cases.append(Case("over-long path", argv))
    return cases


def objective_cases() -> list[Case]:
    """The cost and time objectives with hostile tokens, deadlines, budgets and GPU ranges."""
    cases = []
    for objective in ("cost", "time"):
        base = ("plan", "--objective", objective, "--gpus-range", "8:16", "--json")
        for option in ("--tokens", "--deadline-days", "--budget-usd"):
            cases += [Case("objective", (*base, option, value)) for value in NUMBERS]
        cases += [Case("objective", (*base, "--tokens", "1e-300", "--deadline-days", "1e-300")),
                  Case("objective", ("plan", "--objective", objective, "--gpus-range", f"1:{2**70}", "--json")),
                  Case("objective", ("plan", "--objective", objective, "--gpus-range", f"1:{2**70}", "--tokens",
                                     "1e-300", "--deadline-days", "1e-300"))]
    return cases


def work_cases(folder: Path, quick: bool = False) -> list[Case]:
    """Requests for more work than a command takes: global batches of a billion sequences (event simulations of
    billions of chunk passes), every power of two up to 2^31 as a global batch, 200 global batches, 39
    synchronization methods, 100 million synthetic jobs."""
    (folder / "huge-batch.toml").write_text("[plan]\npp = 2\nglobal_batch = 1073741824\n")
    huge = str(folder / "huge-batch.toml")
    cases = [("simulate", "--plan", huge, "--json"), ("estimate", "--plan", huge, "--simulate", "--json"),
             ("plan", "--gpus", "8", "--global-batch", "1048576", "--json"),
             ("plan", "--gpus", "8", "--global-batch", ",".join(str(8 * i) for i in range(1, 201))),
             ("plan", "--gpus", "8", *(f"--dp-sync=powersgd:rank={i}" for i in range(1, 40))),
             ("schedule", "--synthetic", "pai", "--jobs", "100000000", "--policy", "all")]
    if not quick:
        cases.append(("plan", "--gpus", "8", "--global-batch", f"1:{2**31 - 1}", "--json"))
    return [Case("work bound", argv) for argv in cases]


def listed_cases(folder: Path) -> list[Case]:
    """The hostile inputs a review listed, one per kind (each its own case whatever the enumeration above)."""
    (folder / "listed-deep.json").write_text(_nested(100_000))
    return [Case("listed", tuple(argv)) for argv in (
        ["plan", "--gpus", "8", "--workers", BIG], ["schedule", "--synthetic", "philly", "--jobs", BIG],
        ["schedule", "--synthetic", "philly", "--jobs", "10", "--seed", "-1"],
        ["schedule", "--synthetic", "philly", "--jobs", "100000000"],
        ["estimate", "--model", str(folder / "listed-deep.json")], ["estimate", "--model", "a" * 5_000 + ".json"],
        ["estimate", "--train-tokens", "-1"], ["estimate", "--train-tokens", "nan"],
        ["estimate", "--train-tokens", "inf"], ["plan", "--tokens", "nan"], ["plan", "--tokens", "-1"],
        ["plan", "--objective", "cost", "--gpus-range", "1:32768", "--tokens", "1e-300", "--deadline-days", "1e-300"],
    )] + new_surface_cases(folder)


def new_surface_cases(folder: Path) -> list[Case]:
    """The newer options, plan fields and workload files with the values a review listed (each refused at once)."""
    plans = {"grid-not-square": 'tp = 12\ntp_mode = "2d"\nmicro_batch = 4\n', "chunks-0": "tp = 8\noverlap_chunks = 0\n",
             "chunks-1000": "tp = 8\noverlap_chunks = 1000\n", "grid-chunks": 'tp = 16\ntp_mode = "2d"\nmicro_batch = 4\n'
             "overlap_chunks = 4\n", "stage-length": 'pp = 2\nrecompute = "full"\nstage_recompute = ["full"]\n'}
    argvs = []
    for name, body in plans.items():
        (folder / f"{name}.toml").write_text('[job]\nmodel = "llama3-70b"\ngpus = 48\n[plan]\n' + body)
        argvs.append(["estimate", "--plan", str(folder / f"{name}.toml"), "--json"])
    federated = (EXAMPLES / "federated-toy.toml").read_text()
    for name, old, new in (("sigma", "value = 0.5,", "value = 1e300,"), ("clients", "clients = 100", f"clients = {BIG}"),
                           ("participation", "participation = 0.1 ", "participation = 0 ")):
        (folder / f"federated-{name}.toml").write_text(federated.replace(old, new, 1))
        argvs.append(["estimate", "--model", str(folder / f"federated-{name}.toml"), "--json"])
    glm = (EXAMPLES / "glm-tiny.toml").read_text()
    (folder / "glm-density.toml").write_text(glm.replace("features = 64", "features = 64\ndensity = 2"))
    wide = ",".join(f"{1 + i / 1000:g}" for i in range(200))
    return [Case("new surface", tuple(argv)) for argv in (
        *argvs, ["estimate", "--model", str(folder / "glm-density.toml"), "--json"],
        ["estimate", "--model", str(EXAMPLES / "glm-tiny.toml"), "--gpus", "0", "--json"],
        ["estimate", "--backend", "foo", "--json"], ["design", "--vary", "peak=-1", "--json"],
        ["design", "--price-share", "x=2", "--json"], ["design", "--gpus", "0", "--json"],
        ["design", *(a for name in ("peak", "hbm_bw", "scale_out_bw", "power") for a in ("--vary", f"{name}={wide}")),
         "--json"],
    )]


def warm_up(folder: Path) -> None:
    """Each validator once on its shipped records, untimed: the first ``--classic`` traces ResNet-50 (torch's import
    and the trace take seconds), which is no hostile input's work."""
    for option, source in VALIDATORS.items():
        header, rows = _records(source)
        run(Case("warm-up", ("validate", f"--{option}", _write_csv(folder / f"warm-{option}.csv", header, rows))),
            limit_s=600)


QUICK_CELLS = ("x", "-1", "nan", str(2**70))
"""The garbage cells of the quick selection."""


def all_cases(folder: Path, quick: bool = False) -> list[Case]:
    """Every case above, files written into ``folder`` (after :func:`warm_up`); ``quick``: the listed cases, every
    option and file case, the first over-long name, the cost objective's tokens, and :data:`QUICK_CELLS` in the
    validators' untraced records (no warm-up needed)."""
    if not quick:
        return [*listed_cases(folder), *option_cases(folder), *validator_cases(folder), *file_cases(folder),
                *path_cases(folder), *objective_cases(), *work_cases(folder)]
    paths = [c for c in path_cases(folder) if "a" * 5_000 in c.argv[2] or "a" * 5_000 in c.argv[-1]]
    objective = [c for c in objective_cases() if "cost" in c.argv and ("--tokens" in c.argv or "1:" in c.argv[4])]
    return [*listed_cases(folder), *option_cases(folder), *validator_cases(folder, QUICK_CELLS, untraced=True),
            *file_cases(folder), *paths, *objective, *work_cases(folder, quick=True)]

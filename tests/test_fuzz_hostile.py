"""Enumerated hostile inputs through every command (:mod:`tests.hostile`): none may end in a traceback or run past
the time limit; the refusals a review found missing say what they refuse.

``pytest -s tests/test_fuzz_hostile.py`` prints the counts per command and outcome; ``benchmarks/fuzz_inputs.py``
prints them for the whole set (the slow test's).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile import BIG, EXAMPLES, FAILURES, VALIDATORS, Case, all_cases, run, table, warm_up
from tests.inprocess import cli

pytestmark = pytest.mark.fuzz


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The cases' files, in a folder that is also the working directory (a command's default outputs land there)."""
    path = tmp_path_factory.mktemp("hostile")
    here = os.getcwd()
    os.chdir(path)
    try:
        yield path
    finally:
        os.chdir(here)


def _sweep(cases: list[Case], checked_elsewhere: list[Case] = ()) -> None:  # type: ignore[assignment]
    """Run ``cases``; ``checked_elsewhere``: cases of the same set another test of this session runs, which count
    toward the set's coverage of commands and validators but are not run twice."""
    outcomes = [run(case) for case in cases]
    print("\n" + table(outcomes))
    bad = [f"{o.outcome}: plait {' '.join(a[:60] for a in o.case.argv)}: {o.detail}" for o in outcomes
           if o.outcome in FAILURES]
    assert not bad, "\n".join(bad)
    every = [*cases, *checked_elsewhere]
    commands = {c.command for c in every}
    assert commands == {"estimate", "plan", "simulate", "report", "schedule", "run", "validate", "design"}, commands
    validated = {c.argv[1] for c in every if c.family == "validator CSV"}
    assert validated == {f"--{v}" for v in VALIDATORS}, validated


def test_hostile_inputs_are_answered_or_refused_in_one_line(folder: Path) -> None:
    """The quick selection (about 900 command lines, about 15 s)."""
    _sweep(all_cases(folder, quick=True))


@pytest.mark.slow
def test_every_hostile_input_is_answered_or_refused_in_one_line(folder: Path, request: pytest.FixtureRequest) -> None:
    """The whole set (about 1,700 command lines, every garbage cell in every column); where this session also runs
    the quick selection (its test is selected), the cases it holds are left to it: every case runs once."""
    warm_up(folder)
    cases = all_cases(folder)
    quick = test_hostile_inputs_are_answered_or_refused_in_one_line.__name__
    if any(item.name == quick and item.module is request.module for item in request.session.items):
        held = all_cases(folder, quick=True)
        argvs = {c.argv for c in held}
        assert argvs <= {c.argv for c in cases}  # the quick selection is part of the whole set
        _sweep([c for c in cases if c.argv not in argvs], held)
    else:
        _sweep(cases)


@pytest.mark.parametrize(("argv", "message"), [
    (["plan", "--gpus", "8", "--workers", BIG], f"'--workers': {BIG} is not in the range 1<=x<=1024"),
    (["schedule", "--synthetic", "philly", "--jobs", "100000000"], "'--jobs': 100000000 is not in the range 1<=x<=100000"),
    (["schedule", "--synthetic", "philly", "--seed", "-1"], "'--seed': -1 is not in the range 0<=x<=4294967295"),
    (["estimate", "--train-tokens", "nan"], "'--tokens' / '--train-tokens': nan is not a finite number"),
    (["estimate", "--train-tokens", "-1"], "'--tokens' / '--train-tokens': -1.0 is not in the range 1<=x<=1e+18"),
    (["plan", "--tokens", "inf"], "'--tokens' / '--train-tokens': inf is not in the range 1<=x<=1e+18"),
    (["plan", "--objective", "cost", "--gpus-range", "8:16", "--deadline-days", "0"], "'--deadline-days': 0 must be above 0"),
    (["plan", "--objective", "time", "--gpus-range", "8:16", "--budget-usd", "nan"], "'--budget-usd': nan is not a finite"),
    (["plan", "--objective", "cost", "--gpus-range", "1:32768"], "spans 16 GPU counts (1 to 32768)"),
    (["run", "--plan", str(EXAMPLES / "tiny-plan.toml"), "--dry-run", "--nodes", "0"], "'--nodes': 0 is not in the range 1<=x"),
    (["plan", "--global-batch", ",".join(str(8 * i) for i in range(1, 34))], "names 33 sizes; one search tries at most 32"),
    (["plan", *(f"--dp-sync=powersgd:rank={i}" for i in range(1, 41))], "names 40 methods besides allreduce; one search tries at most 39"),
    (["estimate", "--cluster", "a100-h100-ib", "--global-batch", "-1"], "global_batch=-1 must be > 0"),  # mixed layout
])
def test_numbers_out_of_range_are_refused_where_they_enter(argv: list[str], message: str) -> None:
    code, _, err = cli(argv)
    assert code == 2 and message in err and err.count("\n") == 1, err


def test_a_pipeline_past_the_simulation_bound_is_refused_or_timed_by_the_closed_forms(tmp_path: Path) -> None:
    """2 stages x 2^30 micro-batches: plait simulate refuses it, an estimate that asks for the simulation keeps the
    closed forms and says so (the simulation would hold a schedule entry per pass: gigabytes, minutes)."""
    (tmp_path / "plan.toml").write_text("[plan]\npp = 2\nglobal_batch = 1073741824\n")
    code, _, err = cli(["simulate", "--plan", str(tmp_path / "plan.toml")])
    assert code == 2 and "2,147,483,648 chunk passes a step" in err and "at most 1,000,000" in err, err
    code, out, _ = cli(["estimate", "--plan", str(tmp_path / "plan.toml"), "--simulate", "--json"])
    assert code == 0 and "its 2,147,483,648 chunk passes exceed the event simulation's 1,000,000" in out


def test_a_search_span_names_its_bound_in_help() -> None:
    """The bounds on the work one command may ask for are in --help, not only in the refusal."""
    assert "1<=x<=100000" in cli(["schedule", "--help"])[1]
    assert "at most 8" in " ".join(cli(["plan", "--help"])[1].split())


@pytest.mark.parametrize(("name", "text", "message"), [
    ("deep.json", "[" * 100_000 + "]" * 100_000, "nests its values too deeply"),
    ("digits.json", '{"hidden_size": ' + "9" * 5_000 + "}", "an integer of more than 4,300 digits"),
    ("deep.toml", "a = " + "[" * 5_000 + "]" * 5_000, "nests its values too deeply"),
    ("digits.toml", "num_layers = " + "9" * 5_000, "an integer of more than 4,300 digits"),
])
def test_model_files_past_what_a_parser_reads_are_one_line(tmp_path: Path, name: str, text: str, message: str) -> None:
    (tmp_path / name).write_text(text)
    code, _, err = cli(["estimate", "--model", str(tmp_path / name)])
    assert code == 2 and message in err and err.count("\n") == 1, err


def test_an_over_long_file_name_is_one_line(tmp_path: Path) -> None:
    code, _, err = cli(["estimate", "--plan", str(tmp_path / ("a" * 5_000 + ".toml"))])
    assert code == 2 and "is too long for this system" in err and "characters)" in err, err
    assert err.count("\n") == 1 and len(err) < 300, err


@pytest.mark.parametrize(("option", "column"), [("classic", "gpus"), ("gnn", "layers"), ("dit", "steps"),
                                                ("memory", "hidden"), ("runs", "hidden")])
def test_a_validator_names_a_missing_column_and_a_garbage_cell(tmp_path: Path, option: str, column: str) -> None:
    lines = VALIDATORS[option].read_text(encoding="utf-8").splitlines(keepends=True)
    records = list(csv.reader(lines[:4]))
    at = records[0].index(column)
    for name, rows, message in (
            ("missing.csv", [r[:at] + r[at + 1:] for r in records], f"lacks column {column!r}"),
            ("garbage.csv", [records[0], [*records[1][:at], "x", *records[1][at + 1:]]],
             f"garbage.csv:2: column {column}='x' must be an integer")):
        with (tmp_path / name).open("w", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerows(rows)
        code, _, err = cli(["validate", f"--{option}", str(tmp_path / name)])
        assert code == 2 and message in err and err.count("\n") == 1, err

"""The job options are one definition across estimate, plan, simulate and report; a misspelt model, cluster,
engine or accelerator gets the nearest names on one line; tables read the same through a pipe."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from inprocess import cli

from plait.errors import ConfigError, did_you_mean

SHARED = ("--model", "--cluster", "--engine", "--gpus-range", "--tokens", "--force", "--plan", "--gpus", "--tp",
          "--pp", "--sharding", "--recompute", "--global-batch", "--seq-len", "--dp-sync")
"""Options of one job (what runs where, on which engine, laid out how) that plait report takes as plait estimate
takes them."""


def options_of(command: str) -> dict[str, str]:
    """``plait COMMAND --help``'s options, each with the words of its help (columns joined)."""
    code, out, _ = cli([command, "--help"])
    assert code == 0
    found: dict[str, str] = {}
    name = None
    for line in out.splitlines():
        m = re.match(r"  (--[a-z0-9-]+)\S*(?: \S+)*?(?:\s{2,}(.*))?$", line)
        if m:
            name = m.group(1)
            found[name] = m.group(2) or ""
        elif name and line.startswith(" " * 20):
            found[name] += " " + line.strip()
    return {k: " ".join(v.split()) for k, v in found.items()}


def test_report_takes_the_job_options_estimate_takes_with_the_same_help() -> None:
    estimate, report = options_of("estimate"), options_of("report")
    for option in SHARED:
        if option in ("--gpus-range", "--force"):
            continue  # estimate compares no GPU counts and writes no file
        assert option in estimate and option in report, option
        assert report[option] == estimate[option], option


@pytest.mark.parametrize("option", ["--model", "--cluster", "--engine", "--tokens", "--seq-len", "--gpus-range",
                                    "--json", "--force"])
def test_an_option_plan_shares_reads_the_same_everywhere(option: str) -> None:
    helps = {c: options_of(c).get(option) for c in ("estimate", "plan", "simulate", "report")}
    given = {h for h in helps.values() if h is not None}
    assert len([h for h in helps.values() if h is not None]) >= 2, helps
    # the same words, less the default each command states for itself
    assert len({re.sub(r"\s*\[default: [^\]]*\]\s*$", "", h) for h in given}) == 1, helps


def test_report_of_layout_options_equals_report_of_the_same_plan_file(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text('[job]\nmodel = "llama3-8b"\ncluster = "dgx-h100-ib"\ngpus = 16\n'
                    '[plan]\ntp = 2\npp = 2\nsharding = "zero1"\nglobal_batch = 64\n')
    by_options = cli(["simulate", "--model", "llama3-8b", "--gpus", "16", "--tp", "2", "--pp", "2", "--sharding",
                      "zero1", "--global-batch", "64", "--json"])
    by_file = cli(["simulate", "--plan", str(plan), "--json"])
    assert by_options[0] == by_file[0] == 0, by_options[2] + by_file[2]
    assert by_options[1] == by_file[1]
    code, _, err = cli(["report", "--model", "llama3-8b", "--gpus", "16", "--tp", "2", "--pp", "2", "--global-batch",
                        "64", "--out", str(tmp_path / "r.html")])
    assert code == 0, err
    assert (tmp_path / "r.html").read_text().startswith("<!")


def test_estimate_takes_tokens_as_plan_does() -> None:
    a, b = cli(["estimate", "--tokens", "2e12", "--json"]), cli(["estimate", "--train-tokens", "2e12", "--json"])
    assert a[0] == b[0] == 0 and a[1] == b[1]


@pytest.mark.parametrize(("argv", "suggested"), [
    (["estimate", "--model", "Llama-3-8B"], "llama3-8b"),
    (["estimate", "--model", "meta-llama/Meta-Llama-3-8B"], "llama3-8b"),
    (["estimate", "--model", "mixtral-8x7"], "mixtral-8x7b"),
    (["plan", "--model", "Llama-3-70B", "--gpus", "64"], "llama3-70b"),
    (["estimate", "--cluster", "dgx-h100"], "dgx-h100-ib"),
    (["estimate", "--engine", "torchtitn"], "torchtitan"),
    (["estimate", "--engine", "megatron-cor"], "megatron-core"),
])
def test_an_unknown_name_gets_the_nearest_known_ones_on_one_line(argv: list[str], suggested: str) -> None:
    code, _, err = cli(argv)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert re.search(rf"did you mean [^?]*\b{re.escape(suggested)}\b", err), err


def test_an_unknown_accelerator_in_a_cluster_file_gets_the_nearest(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('name = "x"\naccelerator = "h100-sxm"\n')
    code, _, err = cli(["estimate", "--cluster", str(path)])
    assert code == 2 and "did you mean h100-sxm-80gb?" in err, err


def test_did_you_mean_names_nothing_far_away() -> None:
    assert did_you_mean("zzzz", ["llama3-8b", "gpt3-175b"]) == ""
    assert did_you_mean("", ["llama3-8b"]) == ""
    with pytest.raises(ConfigError, match="no hub"):
        from plait.workload.catalog import resolve_model

        resolve_model("Qwen/Qwen2-7B")


@pytest.mark.parametrize("argv", [["estimate"], ["plan", "--model", "llama3-8b", "--gpus", "16"], ["models"],
                                  ["clusters"], ["engines"]])
def test_piped_output_keeps_each_title_and_fact_on_one_line(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    code, out, _ = cli(argv)  # captured: not a terminal
    assert code == 0
    for line in out.splitlines():
        if line and line[0] not in "┏┃┡│└━╇┳ ":
            # a line of text starts with a word and ends where its phrase ends (no word split onto the next line)
            assert not re.search(r"\b(of|on|per|by|the|a|in)$", line), line
    titles = [line for line in out.splitlines() if line[:1].isalpha()]
    boxes = [i for i, line in enumerate(out.splitlines()) if line.startswith("┏")]
    lines = out.splitlines()
    for i in boxes:  # the line above a table is its whole title or a fact, never a title's last words
        assert i == 0 or lines[i - 1] in titles or lines[i - 1] == ""


@pytest.mark.parametrize("argv", [["report", "--model", "examples/dlrm-small.toml"],
                                  ["simulate", "--model", "examples/dlrm-small.toml"],
                                  ["report", "--model", "examples/graphsage-ogbn-products.toml"]])
def test_a_workload_the_layout_options_do_not_describe_is_refused_in_one_line(argv: list[str], tmp_path: Path) -> None:
    code, _, err = cli([*argv, *(["--out", str(tmp_path / "r.html")] if argv[0] == "report" else [])])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "takes a catalog model" in err, err
    assert not (tmp_path / "r.html").exists()


def test_plait_runs_own_table_reads_whole_through_a_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """``plait run``'s measured-beside-predicted table on a pipe: its title (longer than rich's 80-column fallback)
    on one line, as the other commands' tables (the run itself is replaced: this checks the rendering only)."""
    from types import SimpleNamespace

    import plait.cli.run as run_cli

    name = "a model read from a config file with a long name"
    plan = SimpleNamespace(describe=lambda: "tp=2 pp=2 dp=2 zero1 micro=1 recompute=none", num_gpus=8,
                           dp_sync=SimpleNamespace(infrequent=False))
    report = SimpleNamespace(
        model=SimpleNamespace(name=name), plan=plan, mixed=None, planned=None, predicted_step_s=0.5, uneven=False,
        on_gpu=True, predicted_chunked_bytes=None,
        hardware=SimpleNamespace(name="dgx-h100-ib", source="datasheet"),
        predicted=SimpleNamespace(step_time_s=0.5, memory=SimpleNamespace(total_bytes=2**30)),
        rows=[{"step_time_s": t, "peak_memory_bytes": 2**30, "loss": 1.0} for t in (1.0, 0.5, 0.5)])
    monkeypatch.setattr(run_cli, "run_plan", lambda request, say: SimpleNamespace(exit_code=0, report=report))
    monkeypatch.delenv("COLUMNS", raising=False)
    code, out, err = cli(["run", "--plan", "examples/tiny-plan.toml", "--steps", "3"])  # captured: not a terminal
    title = f"{name}: {plan.describe()} on 8 ranks"
    assert code == 0, err
    assert len(title) > 80 and title in out.splitlines()
    assert any(line.startswith("│ step time s (median after step 1)") for line in out.splitlines()), out

"""plait schedule: determinism, conservation, textbook orderings computed by hand, consolidation and elastic
resizing against plait's own planner, CSV mistakes, the command line."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest
from inprocess import cli

from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.schedule.elastic import Elastic
from plait.schedule.policies import POLICY_NAMES, Consolidate, Fifo, Las, Srtf, make_policy
from plait.schedule.pool import Placement, Pool
from plait.schedule.result import ScheduleResult
from plait.schedule.simulate import Simulator, simulate
from plait.schedule.speed import SpeedModel
from plait.schedule.synthetic import synthetic_trace
from plait.schedule.trace import TraceJob, parse_trace
from plait.schedule.trace_export import chrome_trace
from plait.search.runner import run_search
from plait.search.space import default_space
from plait.workload.catalog import get_model

ROOT = Path(__file__).parents[1]
CLUSTER = "dgx-h100-ib"
MODEL = "gpt3-1.3b"


@cache
def speed_model(cluster: str = CLUSTER) -> SpeedModel:
    return SpeedModel(get_cluster(cluster), get_engine())


def job(job_id: str, arrival_s: float, gpus: int, seconds: float, model: str = MODEL) -> TraceJob:
    """A job that trains ``seconds`` at its requested size, consolidated."""
    at = speed_model().at(model, gpus)
    assert at is not None
    return TraceJob(job_id=job_id, arrival_s=arrival_s, model=model, gpus=gpus, tokens=seconds * at.tokens_per_s)


def run(jobs: tuple[TraceJob, ...], policy: object, gpus: int = 8) -> ScheduleResult:
    return simulate(jobs, Pool(get_cluster(CLUSTER), gpus), speed_model(), policy)  # type: ignore[arg-type]


def jct(result: ScheduleResult, job_id: str) -> float:
    return next(j.jct_s for j in result.jobs if j.job_id == job_id)


def restart_s(gpus: int) -> float:
    at = speed_model().at(MODEL, gpus)
    assert at is not None
    return at.restart_s


def bounded(sim: Simulator, most: int) -> Simulator:
    """``sim`` failing the test at its ``most``-th scheduling pass (a pass that keeps re-waking itself)."""
    passes, run_pass = [], sim._pass

    def counted(at_s: float) -> None:
        passes.append(at_s)
        assert len(passes) < most, f"passes repeat at {at_s} s"
        run_pass(at_s)

    sim._pass = counted  # type: ignore[method-assign]
    return sim


@cache
def small_trace() -> tuple[TraceJob, ...]:
    return synthetic_trace("pai", 60, 3, speed_model(), 32, load=1.5)


def test_same_trace_and_seed_give_the_same_result() -> None:
    assert synthetic_trace("helios", 40, 7, speed_model(), 32) == synthetic_trace("helios", 40, 7, speed_model(), 32)
    assert synthetic_trace("helios", 40, 7, speed_model(), 32) != synthetic_trace("helios", 40, 8, speed_model(), 32)
    for name in ("las", "elastic"):
        first, second = (simulate(small_trace(), Pool(get_cluster(CLUSTER), 32), speed_model(), make_policy(name))
                         for _ in range(2))
        assert first == second


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_no_job_is_lost_and_no_gpu_is_used_twice(name: str) -> None:
    result = simulate(small_trace(), Pool(get_cluster(CLUSTER), 32), speed_model(), make_policy(name))
    assert [j.job_id for j in result.jobs] == [j.job_id for j in small_trace()]
    assert all(j.status == "done" and j.finish_s is not None and j.first_start_s >= j.arrival_s for j in result.jobs)
    edges = sorted([(s.start_s, s.gpus, s.node) for s in result.segments]
                   + [(s.end_s, -s.gpus, s.node) for s in result.segments])  # at one instant, releases first
    held, per_node = 0, [0] * 4
    for _, gpus, node in edges:
        held += gpus
        per_node[node] += gpus
        assert held <= 32 and per_node[node] <= 8
    assert result.gpu_seconds <= result.capacity_gpus * result.makespan_s * (1 + 1e-12)
    assert 0 < result.utilization <= 1


def test_srtf_beats_fifo_on_the_textbook_two_job_case() -> None:
    """A 10-hour job arrives first, a 1-hour job 60 s later; each needs the whole 8-GPU node."""
    long_s, short_s, gap_s = 36_000.0, 3_600.0, 60.0
    jobs = (job("long", 0.0, 8, long_s), job("short", gap_s, 8, short_s))
    fifo, srtf = run(jobs, Fifo()), run(jobs, Srtf())
    # FIFO: long runs to the end, short waits for it.
    assert jct(fifo, "long") == pytest.approx(long_s)
    assert jct(fifo, "short") == pytest.approx(long_s + short_s - gap_s)
    # SRTF: short preempts long at 60 s; long resumes at 3,660 s, pays its restart, trains its last 35,940 s.
    assert jct(srtf, "short") == pytest.approx(short_s)
    assert jct(srtf, "long") == pytest.approx(gap_s + short_s + restart_s(8) + (long_s - gap_s))
    assert srtf.summary()["mean_jct_s"] < fifo.summary()["mean_jct_s"]


def test_las_demotes_a_job_when_its_attained_service_crosses_a_threshold() -> None:
    """8 GPUs: a 10-hour job at 0 crosses 3,600 GPU-s at 450 s and drops below a 5-minute job that came at 100 s
    (2,400 GPU-s in all: it never leaves queue 0)."""
    long_s, short_s = 36_000.0, 300.0
    jobs = (job("long", 0.0, 8, long_s), job("short", 100.0, 8, short_s))
    las = run(jobs, Las(thresholds_gpu_s=(3_600.0,)))
    cross_s = 3_600.0 / 8
    assert jct(las, "short") == pytest.approx(cross_s + short_s - 100.0)
    assert jct(las, "long") == pytest.approx(cross_s + short_s + restart_s(8) + (long_s - cross_s))
    # Below the threshold both sit in queue 0, FIFO within it: with a threshold above 36,000 GPU-s nothing moves.
    assert jct(run(jobs, Las(thresholds_gpu_s=(1e9,))), "long") == pytest.approx(long_s)


def test_the_planner_predicts_a_job_spread_over_nodes_slower_than_consolidated() -> None:
    """On 4x 100 Gb/s Omni-Path per 8 A100s, 8 GPUs as 2 on each of 4 nodes cross the network at every step."""
    cluster = get_cluster("a100-omnipath")
    speed, pool = SpeedModel(cluster, get_engine()), Pool(cluster, 32)
    spread = Placement(nodes=((0, 2), (1, 2), (2, 2), (3, 2)))
    assert pool.spans(spread) == (2, cluster.tiers[1].span_gpus)
    together, apart = speed.at("llama3-8b", 8), speed.at("llama3-8b", 8, pool.spans(spread))
    assert together is not None and apart is not None
    assert apart.tokens_per_s < 0.97 * together.tokens_per_s  # 4.6% slower: replanned to pp=2 to send less
    assert apart.plan != together.plan


@pytest.mark.parametrize(("model", "gpus", "spans"), [("gpt3-1.3b", 32, None), ("llama2-13b", 64, (4, 32768)),
                                                     ("llama3-8b", 16, (2, 32768))])
def test_the_speed_models_narrowed_space_finds_the_plan_of_the_whole_replan_space(
        model: str, gpus: int, spans: tuple[int, ...] | None) -> None:
    """The options the speed model leaves out (sequence parallelism off, ZeRO-2 and hybrid sharding, which
    megatron-core refuses) never hold the best plan: the search over the space with them finds the same one."""
    speed = SpeedModel(get_cluster(CLUSTER), get_engine())
    got = speed.at(model, gpus, spans)
    cluster = speed._seen_as(spans or speed._native_spans)
    whole = replace(default_space(get_model(model), cluster, gpus, (speed.global_batch,), precisions=("bf16",)),
                    schedules=("1f1b",), offload=((False, False),), cp=(1,),
                    recompute=(("none", 1.0), ("selective", 1.0), ("full", 1.0)))
    assert whole.sequence_parallel == (True, False) and "zero2" in whole.shardings
    best = run_search(get_model(model), cluster, whole, engine=get_engine(), workers=1).top(1)[0]
    assert got is not None and (got.plan, got.tokens_per_s) == (best.plan, best.tokens_per_s)
def test_searches_sharing_per_layer_quantities_answer_as_each_searched_alone() -> None:
    """A model's searches on one view of the cluster share their per-layer quantities (``plait.cost.inner.Known``):
    a size, or a spread view, searched after others answers what a planner that searched nothing before answers (at
    32 GPUs Llama 3 70B's best plan is tp=8 on whole nodes and tp=2 spread 2 a node). Quantities costed for one model
    are refused for another."""
    cluster = get_cluster("a100-omnipath")
    shared, spread = SpeedModel(cluster, get_engine()), (2, cluster.tiers[1].span_gpus)
    for gpus, spans in ((32, None), (64, None), (32, spread), (64, spread)):
        alone = SpeedModel(cluster, get_engine()).at("llama3-70b", gpus, spans)
        assert alone is not None
        assert shared.at("llama3-70b", gpus, spans) == alone
    known = shared._known["llama3-70b", spread]
    with pytest.raises(AssertionError, match="not another's"):  # the key holds no model: another's is refused
        known.check(get_model("llama3-8b"), known.of[1], known.of[2])  # type: ignore[index]


def test_consolidation_waits_for_one_node_where_fifo_spreads() -> None:
    """Two 6-GPU jobs leave 2 free GPUs on each of 2 nodes; a 4-GPU job arrives. FIFO spreads it over both nodes;
    delay scheduling waits 90 s for the short job's node and puts it on one; with no delay it spreads too."""
    jobs = (job("a", 0.0, 6, 100.0), job("b", 0.0, 6, 10_000.0), job("c", 10.0, 4, 1_000.0))

    def nodes_of_c(result: ScheduleResult) -> int:
        return len({s.node for s in result.segments if s.job_id == "c"})

    assert nodes_of_c(run(jobs, Fifo(), 16)) == 2
    waited = run(jobs, Consolidate(delay_s=600.0), 16)
    assert nodes_of_c(waited) == 1
    assert next(j.first_start_s for j in waited.jobs if j.job_id == "c") == pytest.approx(100.0)
    assert nodes_of_c(run(jobs, Consolidate(delay_s=0.0), 16)) == 2


def test_consolidation_takes_any_placement_when_its_delay_ends_at_a_time_rounding_cannot_reach() -> None:
    """Regression: a job arriving at 1,698.142 s woke at 1,698.142 + 600 = 2,298.142 s, where 2,298.142 - 1,698.142
    is 599.9999999999998 < 600, so it never counted as delayed and the pass re-woke itself at the same instant
    forever (the 10,000-job benchmark hung). The delay is now tested as ``now >= waiting_since + delay``, the wake's
    own sum."""
    arrive_s = 1_698.142
    assert (arrive_s + 600.0) - arrive_s < 600.0  # the rounding this test is about
    jobs = (job("a", 0.0, 6, 10_000.0), job("b", 0.0, 6, 10_000.0), job("c", arrive_s, 4, 1_000.0))
    sim = bounded(Simulator(jobs, Pool(get_cluster(CLUSTER), 16), speed_model(), Consolidate(delay_s=600.0)), 100)
    c = next(j for j in sim.run().jobs if j.job_id == "c")
    assert c.first_start_s == pytest.approx(arrive_s + 600.0) and c.sizes == (4,)


def test_elastic_grows_a_lone_job_and_runs_the_plan_replanned_at_its_new_size() -> None:
    lone = (job("solo", 0.0, 2, 7_200.0),)
    fifo, elastic = run(lone, Fifo()), run(lone, Elastic())
    grown = elastic.jobs[0]
    assert grown.sizes == (8,)
    at2, at8 = speed_model().at(MODEL, 2), speed_model().at(MODEL, 8)
    assert at2 is not None and at8 is not None and at2.plan != at8.plan
    assert jct(elastic, "solo") == pytest.approx(lone[0].tokens / at8.tokens_per_s)
    assert jct(elastic, "solo") < jct(fifo, "solo") == pytest.approx(7_200.0)


def test_elastic_passes_only_at_events_so_a_job_of_centuries_is_one_pass_each_way() -> None:
    years = 3e9  # ~95 years at the requested size; the fuzz found elastic's 1,800 s ticks stepping through them
    jobs = (job("long", 0.0, 2, years), job("short", 10.0, 2, 3_600.0))
    result = bounded(Simulator(jobs, Pool(get_cluster(CLUSTER), 8), speed_model(), Elastic()), 20).run()
    assert {j.job_id for j in result.done} == {"long", "short"}
    assert next(j for j in result.jobs if j.job_id == "long").sizes[-1] == 8  # the whole pool once "short" is done


@pytest.mark.parametrize(("text", "fragment"), [
    ("job,arrival_s,model,gpus,tokens\n", "header"),
    ("job_id,arrival_s,model,gpus,tokens\na,0,gpt3-125m,two,1e9\n", "gpus='two' must be a whole number"),
    ("job_id,arrival_s,model,gpus,tokens\na,-1,gpt3-125m,1,1e9\n", "arrival_s=-1 must be >= 0"),
    ("job_id,arrival_s,model,gpus,tokens\na,0,gpt9,1,1e9\n", "model='gpt9' is not in the catalog"),
    ("job_id,arrival_s,model,gpus,tokens\na,0,gpt3-125m,1,0\n", "tokens=0 must be > 0"),
    ("job_id,arrival_s,model,gpus,tokens\na,0,gpt3-125m,1180591620717411303424,1e9\n",  # overflowed the columns
     "gpus=1180591620717411303424 must be in "),
    ("job_id,arrival_s,model,gpus,tokens\na,0,gpt3-125m,1,1e9\na,1,gpt3-125m,1,1e9\n", "appears twice"),
    ("job_id,arrival_s,model,gpus,tokens,deadline_s\na,50,gpt3-125m,1,1e9,20\n", "must be after arrival_s=50"),
])
def test_a_bad_trace_row_is_one_line_naming_the_value_and_the_rule(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(")) as err:
        parse_trace(text, "t.csv")
    assert "\n" not in str(err.value)


def test_the_trace_export_has_one_slice_per_allocation_and_none_overlap_on_a_lane() -> None:
    result = run(small_trace(), Srtf(), 32)
    doc = json.loads(json.dumps(chrome_trace(result)))  # what a viewer loads
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert sorted((e["name"], e["pid"], e["args"]["gpus"]) for e in slices) == sorted(
        (s.job_id, s.node, s.gpus) for s in result.segments)
    assert result.jobs and {e["name"] for e in slices} == {j.job_id for j in result.done}
    lanes: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in slices:
        lanes.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in lanes.values():
        for before, after in itertools.pairwise(sorted(spans)):
            assert after[0] >= before[1] - 1e-3  # microseconds: a nanosecond of float rounding at most


def test_plot_dir_writes_both_pictures_and_trace_out_a_loadable_trace(tmp_path: Path) -> None:
    code, _, err = cli(["schedule", "--synthetic", "pai", "--jobs", "30", "--gpus", "32", "--policy", "las",
                        "--plot-dir", str(tmp_path / "plots"), "--trace-out", str(tmp_path / "t.json")])
    assert code == 0, err
    for name in ("jct_cdf.png", "utilization.png"):
        data = (tmp_path / "plots" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert {e["name"] for e in events if e["ph"] == "X"} == {f"pai-{i:05d}" for i in range(30)}


def test_the_command_runs_a_shipped_trace_as_json_and_refuses_mistakes_in_one_line(tmp_path: Path) -> None:
    code, out, err = cli(["schedule", "--trace", str(ROOT / "examples/traces/pai-like.csv"), "--policy", "srtf",
                          "--json", "--trace-out", str(tmp_path / "t.json")])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["jobs"] == 300 and doc["policies"][0]["done"] == 300 and doc["policies"][0]["policy"] == "srtf"
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    code, _, err = cli(["schedule", "--trace", str(ROOT / "examples/traces/pai-like.csv"), "--trace-out",
                        str(tmp_path / "t.json")])
    assert code == 2 and "already exists" in err and err.count("\n") == 1
    code, _, err = cli(["schedule", "--policy", "fifo"])
    assert code == 2 and "--trace PATH or --synthetic" in err

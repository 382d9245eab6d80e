"""Two emulated sites over a rate-limited link: each synchronization method measured against its prediction.

Run (root, Linux): python benchmarks/low_comm.py [--rate 200mbit] [--steps 16] [--quick]

1. Two network namespaces (the sites) joined by a veth pair, each end shaped with ``tc qdisc ... tbf`` (``netem``
   is not available here); every namespace and link is created here and removed at the end, whatever happens.
2. ``plait calibrate --ranks 4`` describes the machine as the job uses it: the 4 ranks share its cores, and
   calibrate times every compute figure and the loopback collectives on all 4 at once (an earlier version timed
   2 and scaled by a matmul loop's 4-against-2 slowdown, 2.3-2.4x on an AMD host, where
   training slowed 1.6x). The collective sweep of ``plait.run.calibrate`` run with one rank in each namespace
   describes the link between them. The two become one cluster file: a site tier of 2 ranks and a wide-area tier
   of 4 whose per-rank share is the link over the 2 ranks of a site. The ranks are told that cluster (the plan's
   ``[job] cluster``), so their replicas all-reduce hierarchically across the sites (:mod:`plait.run.sites`),
   as the cost model charges.
3. Each method trains examples/small-model.toml on 4 ranks (2 per site, gloo, torchrun across the namespaces);
   the mean step period over whole synchronization periods after the first period (from the steps' start times:
   a rank's own step time leaves out its wait for the others in the loss's reduction, which on 2 shared cores
   gives it more than its share of the CPU) is printed next to
   ``plait estimate`` for the plan on that cluster file (engine plait), with the bytes a rank hands to
   collectives per step and the bytes that leave a site (target: |error| <= 20%). A run that never
   synchronizes (:data:`BASELINE`) comes first: the seconds each method adds to it, measured and predicted, show
   the synchronization's own error apart from the compute's.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from plait.run.precision import cpu_runs_natively

ROOT = Path(__file__).parents[1]
MODEL = ROOT / "examples" / "small-model.toml"
METHODS = ["allreduce", "bf16", "powersgd:rank=4", "topk:ratio=0.01", "quantize:bits=8", "local_sgd:every=4",
           "diloco:every=4", "palsgd:every=4", "dreamddp:every=4", "pipe_sgd"]
PLAN = "dp_replicate = 4\nglobal_batch = 16\nmicro_batch = 4\n"
BASELINE = "local_sgd:every=1000000"
"""Replicas that never synchronize after step 0 (excluded): the step without synchronization, measured and
predicted, which the methods' synchronization seconds are counted from."""
ADDRESSES = ("10.231.0.1", "10.231.0.2")
LINK_SIZES = [2**12, 2**18, 2**22, 2**24]
RANKS = 4
"""Ranks of every run, 2 in each site."""


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


@contextlib.contextmanager
def two_sites(rate: str) -> Iterator[tuple[list[str], list[str]]]:
    """(namespaces, interfaces) of two sites joined by a veth pair shaped to ``rate`` each way; removed on exit."""
    tag = str(os.getpid() % 100000)
    names, links = [f"plait-a-{tag}", f"plait-b-{tag}"], [f"pla{tag}", f"plb{tag}"]
    try:
        for ns in names:
            sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", links[0], "type", "veth", "peer", "name", links[1])
        for ns, link, address in zip(names, links, ADDRESSES):
            sh("ip", "link", "set", link, "netns", ns)
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{address}/24", "dev", link)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", link, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", link, "root", "tbf", "rate", rate,
               "burst", "256kb", "latency", "100ms")
        yield names, links
    finally:
        for ns in names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)  # takes the veth pair with it


def in_site(ns: str, link: str, command: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``command`` run inside namespace ``ns``, gloo bound to its end of the link; output to a log file."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": link, **(env or {})}
    log = tempfile.NamedTemporaryFile("w+", prefix="low_comm-", suffix=".log", delete=False)
    process = subprocess.Popen(["ip", "netns", "exec", ns, *command], env=environment, text=True, stdout=log,
                               stderr=subprocess.STDOUT)
    process.args = [*process.args, f"(log: {log.name})"]  # where wait_all points on failure
    return process


def wait_all(processes: list[subprocess.Popen[str]], what: str) -> None:
    for process in processes:
        process.wait(timeout=1800)
        if process.returncode != 0:
            raise SystemExit(f"{what} failed (exit {process.returncode}) {process.args[-1]}")


def measure_link(names: list[str], links: list[str], tmp: Path) -> dict[str, list[float]]:
    """plait calibrate's collective sweep with one rank in each site: seconds per collective and size."""
    out = tmp / "link.txt"
    code = ("import sys; from plait.run.calibrate import collective_sweep; "
            f"collective_sweep(int(sys.argv[1]), 2, 29611, {LINK_SIZES}, {str(out)!r}, False, 3, 5)")
    wait_all([in_site(ns, link, [sys.executable, "-c", code, str(rank)], {"MASTER_ADDR": ADDRESSES[0]})
              for rank, (ns, link) in enumerate(zip(names, links))], "the link sweep")
    lines = out.read_text().splitlines()
    return {k: [float(x) for x in line.split()] for k, line in zip(("all_reduce", "all_gather", "reduce_scatter"), lines)}


def cluster_file(site: dict, link: dict[str, list[float]], path: Path) -> None:  # type: ignore[type-arg]
    import tomli_w

    factor = {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5}  # 2 ranks: bus bytes per buffer byte
    busbw = {k: [factor[k] * m / t / 1e9 for m, t in zip(LINK_SIZES, link[k])] for k in link}
    line = max(max(v) for v in busbw.values())
    source = "measured by benchmarks/low_comm.py (plait calibrate's collective sweep, one rank in each site)"
    curve = lambda ys: {"sizes": LINK_SIZES, "fractions": [round(min(y / line, 1.0), 4) for y in ys], "source": source}
    site["tiers"][0]["span_gpus"] = 2
    site["tiers"].append({
        "name": "veth", "wide_area": True, "span_gpus": 4, "bandwidth_gb_per_s_per_gpu": round(line / 2, 5),
        "latency_us": round(link["all_reduce"][0] / 2 * 1e6, 1), "efficiency": curve(busbw["all_reduce"]),
        "all_gather_efficiency": curve(busbw["all_gather"]), "reduce_scatter_efficiency": curve(busbw["reduce_scatter"]),
        "source": source + " (the link over the 2 ranks of a site)"})
    site["gpus_per_node"] = site["scale_up_domain_gpus"] = 2
    site["name"] = "two emulated sites of 2 ranks"
    path.write_text(tomli_w.dumps(site))


# bf16 where this CPU would emulate it is fp32, as `plait run` does it (plait.run.precision), and as
# `plait calibrate` then measures the bf16 figures
FULL_PRECISION = [] if cpu_runs_natively("bf16") else ["--full-precision"]


def stem(spec: str) -> str:
    """A file name for ``spec`` (each run its own plan and metrics: the worker appends to a metrics file)."""
    return "".join(c if c.isalnum() else "_" for c in spec)


def run_method(names: list[str], links: list[str], spec: str, steps: int, tmp: Path, precision: list[str],
               cluster: Path) -> list[float]:
    """When each step of rank 0 began (its ``started_s``), for ``spec`` on 4 ranks, 2 in each site of ``cluster``
    (the replicas all-reduce hierarchically across them: plait.run.sites)."""
    plan, metrics = tmp / f"{stem(spec)}.toml", tmp / f"{stem(spec)}.jsonl"
    plan.write_text(f'[job]\nmodel = "{MODEL}"\ncluster = "{cluster}"\n[plan]\n{PLAN}dp_sync = "{spec}"\n')
    processes = []
    for node, (ns, link) in enumerate(zip(names, links)):
        processes.append(in_site(ns, link, [
            sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={node}", "--nproc-per-node=2",
            f"--master-addr={ADDRESSES[0]}", "--master-port=29612", "-m", "plait.run.worker", "--plan", str(plan),
            "--steps", str(steps), *(["--metrics", str(metrics)] if node == 0 else []), *precision]))
    wait_all(processes, f"dp_sync={spec}")
    return [json.loads(line)["started_s"] for line in metrics.read_text().splitlines()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", default="200mbit", help="tbf rate of the link, each way")
    parser.add_argument("--steps", type=int, default=16, help="optimizer steps per method (a multiple of 4)")
    parser.add_argument("--quick", action="store_true", help="plait calibrate --quick for the site")
    parser.add_argument("--methods", nargs="+", default=METHODS, help="dp_sync specs to measure")
    parser.add_argument("--full-precision", action="store_true",
                        help="train fp32 even where this CPU runs bf16 natively (and predict fp32)")
    args = parser.parse_args()
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        print("SKIP: needs root, ip and tc (network namespaces and a tbf qdisc)")
        return 0
    import tomllib

    from plait.cost.sync import payload_bytes
    from plait.engine.catalog import get_engine
    from plait.hardware.catalog import load_cluster_file
    from plait.plan.io import read_plan_file
    from plait.predict.estimate import estimate
    from plait.run.outer_loop import pseudo_steps
    from plait.sync import parse
    from plait.workload.catalog import resolve_model
    from plait.workload.tensors import parameter_shapes

    tmp = Path(tempfile.mkdtemp())
    with two_sites(args.rate) as (names, links):
        site_file = tmp / "site.toml"
        wait_all([in_site(names[0], links[0], [sys.executable, "-m", "plait", "calibrate", "--ranks", str(RANKS), "--output", str(site_file),
                                               *(["--quick"] if args.quick else [])])], "plait calibrate")
        link = measure_link(names, links, tmp)
        cluster_path = tmp / "two-sites.toml"
        cluster_file(tomllib.loads(site_file.read_text()), link, cluster_path)
        cluster, model = load_cluster_file(cluster_path), resolve_model(str(MODEL))
        wide = cluster.tiers[-1]
        print(f"link {args.rate} each way: measured {wide.bandwidth_gb_per_s_per_gpu * 2 * 8:.3f} Gbit/s, "
              f"latency {wide.latency_us / 1000:.2f} ms; the site calibrated with all {RANKS} ranks at once")
        named = parameter_shapes(model)
        precision = ["--full-precision"] if args.full_precision else FULL_PRECISION
        print(f"training {'fp32' if precision else 'bf16'}")
        print(f"{'dp_sync':22s} {'measured s':>11s} {'predicted s':>12s} {'error':>7s} {'sync meas.':>11s} "
              f"{'sync pred.':>11s} {'bytes/step':>12s} {'leave a site':>13s}")
        base: tuple[float, float] | None = None
        for spec in [BASELINE, *args.methods]:
            starts = run_method(names, links, spec, args.steps, tmp, precision, cluster_path)
            every = 1 if spec == BASELINE else parse(spec).every
            start = max(every, 2)  # after the first period (start-up, first buckets)
            end = start + (len(starts) - 1 - start) // every * every  # whole periods
            measured = (starts[end] - starts[start]) / (end - start)  # the period the job steps at
            _, plan = read_plan_file(tmp / f"{stem(spec)}.toml")
            sync = parse(spec)
            if sync.method == "palsgd":  # predicted at the share of pseudo-steps these steps drew, not at p
                draws = list(itertools.islice(pseudo_steps(sync.p), len(starts)))[start:end]
                share = sum(draws) / len(draws)
                plan = dataclasses.replace(plan, dp_sync=dataclasses.replace(sync, p=share))
                print(f"  palsgd: {sum(draws)} of the {len(draws)} measured steps were pseudo-synchronization steps")
            est = estimate(model, cluster, plan, engine=get_engine("plait"))
            sent = payload_bytes(parse(spec), named) if spec != BASELINE else 0.0
            base = base or (measured, est.step_time_s)
            label = "none (baseline)" if spec == BASELINE else spec
            print(f"{label:22s} {measured:11.3f} {est.step_time_s:12.3f} {100 * (est.step_time_s / measured - 1):+6.1f}% "
                  f"{measured - base[0]:+11.3f} {est.step_time_s - base[1]:+11.3f} "
                  f"{sent:12,.0f} {est.egress_bytes_per_step:13,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

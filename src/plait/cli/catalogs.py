"""``plait models`` and ``plait clusters``: list the packaged catalogs."""

from __future__ import annotations

from typing import Annotated

import typer

from plait.cli.output import print_json
from plait.engine.catalog import DEFAULT_ENGINE, engine_names, get_engine
from plait.hardware.catalog import accelerator_names, cluster_names, get_accelerator, get_cluster
from plait.hardware.mixed_catalog import get_mixed_cluster, mixed_cluster_names
from plait.terminal import rich_console, titled_table
from plait.workload.catalog import get_model, model_names


def models_command(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """List the model catalog with parameter counts."""
    rows = []
    for slug in model_names():
        m = get_model(slug)
        rows.append({"slug": slug, "name": m.name, "params": m.total_params(), "active_params": m.active_params(),
                     "layers": m.num_layers, "hidden": m.hidden_size, "heads": m.num_heads,
                     "kv_heads": m.num_kv_heads, "seq_len": m.seq_len, "moe": bool(m.moe), "source": m.source})
    if as_json:
        print_json(rows)
        return
    table = titled_table("plait models")
    for col in ("slug", "name", "params", "active", "layers", "hidden", "heads/kv", "seq"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["slug"], r["name"], f"{r['params'] / 1e9:.2f}B", f"{r['active_params'] / 1e9:.2f}B",
                      str(r["layers"]), str(r["hidden"]), f"{r['heads']}/{r['kv_heads']}", str(r["seq_len"]))
    rich_console().print(table)


def clusters_command(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """List the cluster presets and accelerators."""
    clusters = []
    for slug in cluster_names():
        c = get_cluster(slug)
        clusters.append({"slug": slug, "name": c.name, "accelerator": c.accelerator.name,
                         "gpus_per_node": c.gpus_per_node, "scale_up_domain_gpus": c.scale_up_domain_gpus,
                         "tiers": [{"name": t.name, "span_gpus": t.span_gpus,
                                    "bandwidth_gb_per_s_per_gpu": t.bandwidth_gb_per_s_per_gpu} for t in c.tiers],
                         "price_per_gpu_hour_usd": c.price_per_gpu_hour_usd, "power_limit_w": c.power_limit_w})
    accelerators = [{"slug": s, "name": get_accelerator(s).name, "memory_gib": get_accelerator(s).memory_gib,
                     "peak_tflops": get_accelerator(s).peak_tflops} for s in accelerator_names()]
    mixed = [_mixed_row(slug) for slug in mixed_cluster_names()]
    if as_json:
        print_json({"clusters": clusters, "mixed_clusters": mixed, "accelerators": accelerators})
        return
    console = rich_console()
    table = titled_table("plait clusters")
    for col in ("slug", "accelerator", "node", "scale-up", "network tiers (GB/s per GPU)", "$/GPU-h"):
        table.add_column(col)
    for c in clusters:
        tiers = ", ".join(f"{t['name']} {t['bandwidth_gb_per_s_per_gpu']:g}" for t in c["tiers"])
        gpu = c["accelerator"] + (f" at {c['power_limit_w']:g} W" if c["power_limit_w"] else "")
        table.add_row(c["slug"], gpu, str(c["gpus_per_node"]), str(c["scale_up_domain_gpus"]), tiers,
                      f"{c['price_per_gpu_hour_usd']:.2f}")
    console.print(table)
    acc = titled_table("accelerators")
    for col in ("slug", "name", "memory GiB", "bf16 TFLOP/s", "fp8 TFLOP/s"):
        acc.add_column(col)
    for a in accelerators:
        peaks = a["peak_tflops"]
        acc.add_row(a["slug"], a["name"], f"{a['memory_gib']:g}", f"{peaks.get('bf16', peaks.get('fp16', 0)):g}",
                    f"{peaks.get('fp8', 0):g}" if "fp8" in peaks else "-")
    console.print(acc)
    table = titled_table("mixed clusters (plait estimate/plan --cluster SLUG share one plan among the groups)")
    for col in ("slug", "groups", "joined by (GB/s per GPU)", "$/h"):
        table.add_column(col)
    for m in mixed:
        groups = ", ".join(f"{g['name']}: {g['num_gpus']} x {g['accelerator']}" for g in m["groups"])
        table.add_row(m["slug"], groups, f"{m['join']['name']} {m['join']['bandwidth_gb_per_s_per_gpu']:g}",
                      f"{m['price_per_hour_usd']:,.2f}")
    console.print(table)


def _mixed_row(slug: str) -> dict[str, object]:
    m = get_mixed_cluster(slug)
    return {"slug": slug, "name": m.name, "num_gpus": m.num_gpus, "price_per_hour_usd": m.price_per_hour_usd,
            "groups": [{"name": g.name, "cluster": g.cluster.name, "accelerator": g.cluster.accelerator.name,
                        "num_gpus": g.num_gpus, "price_per_gpu_hour_usd": g.cluster.price_per_gpu_hour_usd}
                       for g in m.groups],
            "join": {"name": m.join.name, "bandwidth_gb_per_s_per_gpu": m.join.bandwidth_gb_per_s_per_gpu},
            "source": m.source}


def engines_command(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """List the engines: how each runs a plan (cited facts) and the plan options it cannot run."""
    rows = []
    for key in engine_names():
        e = get_engine(key)
        rows.append({"engine": key, "spec": e.spec, "title": e.title, "default": key == DEFAULT_ENGINE,
                     "export": e.export, "launchable": e.launchable, "unsupported": e.unsupported,
                     "machines": e.machines, "facts": e.sources})
    if as_json:
        print_json(rows)
        return
    table = titled_table("plait engines")
    for col in ("engine", "title", "export", "cannot run"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["spec"] + (" (default)" if r["default"] else ""), r["title"], r["export"],
                      ", ".join(r["unsupported"]) or "-")
    rich_console().print(table)

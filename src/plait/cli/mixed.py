"""``plait estimate`` and ``plait plan`` on a mixed cluster (:mod:`plait.hardware.mixed`): thin wrappers that parse
the shares, call :mod:`plait.predict.mixed` / :mod:`plait.search.mixed`, and print."""

from __future__ import annotations

from pathlib import Path

from plait.cli.output import print_json
from plait.cli.render_mixed import print_mixed_estimate, print_mixed_search
from plait.engine.catalog import DEFAULT_ENGINE, get_engine
from plait.errors import ConfigError
from plait.export.artifact import write_artifacts
from plait.export.mixed import mixed_artifacts
from plait.hardware.mixed import MixedCluster, sliced
from plait.plan.mixed import SPLITS, GroupShare, MixedPlan, even_shares
from plait.plan.plan import Plan
from plait.predict.mixed import estimate_mixed, mixed_layout
from plait.predict.mixed_result import MixedEstimate, mixed_to_dict
from plait.progress import LazyProgress
from plait.search.mixed import ENGINE, plan_mixed
from plait.search.mixed_split import balance_data, balance_pipeline
from plait.terminal import rich_console
from plait.workload.catalog import DEFAULT_MODEL, resolve_model
from plait.workload.model import ModelSpec


def parse_assignments(text: str | None, option: str) -> dict[str, str]:
    """``group=value,group=value`` as a dict (one-line error naming the option otherwise)."""
    if not text:
        return {}
    out = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip() or name.strip() in out:
            raise ConfigError(f"{option} {text!r} must be GROUP=VALUE,... with each group once")
        out[name.strip()] = value.strip()
    return out


def _int(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{what}={value!r} must be an integer") from None


def mixed_shares(cluster: MixedCluster, split: str, shares: str | None, local_steps: str | None) -> list[GroupShare]:
    """Shares from ``--shares`` (data: sequences per step per group; pipeline: layers per stage, ``8+8``) and
    ``--local-steps``; without ``--shares`` every group, to be balanced by speed."""
    if split not in SPLITS:
        raise ConfigError(f"--split {split!r} must be one of {', '.join(SPLITS)}")
    given, steps = parse_assignments(shares, "--shares"), parse_assignments(local_steps, "--local-steps")
    for name in [*given, *steps]:
        cluster.group(name)
    names = list(given) or [g.name for g in cluster.groups]
    out = []
    for name in names:
        value, common = given.get(name), {"group": name, "num_gpus": cluster.group(name).num_gpus}
        local = _int(steps.get(name, "1"), "local_steps")  # checked for every group, as --local-steps names them
        if value is None:
            out.append(GroupShare(**common, local_steps=local))
        elif split == "data":
            out.append(GroupShare(**common, batch=_int(value, f"{name} batch"), local_steps=local))
        else:
            out.append(GroupShare(**common, layers=tuple(_int(v, f"{name} layers") for v in value.split("+"))))
    return out


def mixed_estimate(model_name: str | None, cluster: MixedCluster, layout: Plan, split: str,
                   parts: list[GroupShare], given: bool, engine: str | None) -> MixedEstimate:
    """The estimate ``plait estimate`` prints for a mixed cluster: the shares ``parts`` as ``given`` (``--shares``),
    or balanced by speed."""
    model: ModelSpec = resolve_model(model_name or DEFAULT_MODEL)
    eng = get_engine(engine or DEFAULT_ENGINE)
    layout = mixed_layout(model, layout)
    if given:
        return estimate_mixed(model, cluster, MixedPlan(plan=layout, split=split, shares=tuple(parts)), engine=eng)
    if split == "pipeline":
        best = balance_pipeline(model, cluster, layout, eng, 64)
        if best is None:
            raise ConfigError(f"a pipeline split needs pp to be a multiple of the {len(cluster.groups)} groups with whole "
                              f"stages on each, vpp=1 and a dense model (got {layout.describe()}); or give --shares")
        return best
    even = MixedPlan(plan=layout, split="data", shares=even_shares(layout, parts))
    est = estimate_mixed(model, cluster, even, engine=eng)
    return est if any(s.local_steps > 1 for s in parts) else balance_data(model, cluster, est, eng, 64)


def print_mixed(est: MixedEstimate, as_json: bool, train_tokens: float) -> None:
    """Print one mixed estimate."""
    if as_json:
        print_json(mixed_to_dict(est, train_tokens))
    else:
        print_mixed_estimate(rich_console(), est, train_tokens)


def mixed_plan(model_name: str, cluster_name: str, cluster: MixedCluster, global_batch: int, engine: str | None,
               top: int, memory_margin: float, as_json: bool, gpus: int | None = None, export: Path | None = None,
               force: bool = False) -> None:
    """``plait plan`` on a mixed cluster (``gpus`` of its devices: all by default): the ranked mixed plans against
    the best single group; ``export``: the best mixed plan as plan.toml there."""
    model = resolve_model(model_name)
    cluster = sliced(cluster, gpus or cluster.num_gpus)
    with LazyProgress("planning over device groups", quiet=as_json, unit="steps") as bar:
        result = plan_mixed(model, cluster, global_batch, engine=get_engine(engine or ENGINE),
                            memory_margin=memory_margin, progress=bar)
    written = []
    if export is not None and (engine or ENGINE) != ENGINE:
        raise ConfigError(f"--export with --engine {engine}: a mixed plan runs on plait's runtime (--engine {ENGINE})")
    if export is not None:
        if not result.plans:
            raise ConfigError(f"--export {export}: no mixed plan fits {cluster.name} at global batch {global_batch}")
        written = write_artifacts(export, mixed_artifacts(result.plans[0].plan, model_name, cluster_name, export),
                                  overwrite=force)
    if as_json:
        best = result.best_baseline
        print_json({"plans": [mixed_to_dict(e) for e in result.plans[:top]],
                    "even": mixed_to_dict(result.even) if result.even else None,
                    "baselines": {g: e.to_dict() | {"usd_per_million_tokens": e.cost_usd(1e6)}
                                  for g, e in result.baselines.items()},
                    "best_baseline": best[0] if best else None, "per_tier": result.per_tier,
                    "exported": [str(p) for p in written]})
    else:
        console = rich_console()
        print_mixed_search(console, result, top)
        for path in written:
            console.print(f"wrote {path} (the best mixed plan; run it with `plait run --plan {path}`)")


"""``plait estimate`` and ``plait plan`` on a mixed cluster (:mod:`plait.hardware.hetero`): thin wrappers that parse
the shares, call :mod:`plait.predict.hetero` / :mod:`plait.search.hetero`, and print."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from plait.cli.output import print_json
from plait.cli.render_mixed import print_mixed_estimate, print_mixed_search
from plait.engine.catalog import DEFAULT_ENGINE, get_engine
from plait.errors import ConfigError
from plait.hardware.hetero import MixedCluster
from plait.hardware.mixed_catalog import mixed_cluster_names, resolve_any_cluster
from plait.plan.hetero import SPLITS, GroupShare, MixedPlan
from plait.plan.plan import Plan
from plait.predict.hetero import MixedEstimate, estimate_mixed, mixed_to_dict
from plait.workload.catalog import resolve_model
from plait.workload.model import ModelSpec


def is_mixed_cluster(name: str | None) -> bool:
    """Whether ``name`` is a mixed preset or a TOML file with ``groups`` (read only when it is a file)."""
    if name is None:
        return False
    if name in mixed_cluster_names():
        return True
    return Path(name).suffix == ".toml" and Path(name).is_file() and isinstance(resolve_any_cluster(name), MixedCluster)


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
        group, value = cluster.group(name), given.get(name)
        share = GroupShare(group=name, num_gpus=group.num_gpus, local_steps=_int(steps.get(name, "1"), "local_steps"))
        if value is not None and split == "data":
            share = GroupShare(group=name, num_gpus=group.num_gpus, batch=_int(value, f"{name} batch"),
                               local_steps=share.local_steps)
        elif value is not None:
            share = GroupShare(group=name, num_gpus=group.num_gpus,
                               layers=tuple(_int(v, f"{name} layers") for v in value.split("+")))
        out.append(share)
    return out


def mixed_estimate(model_name: str | None, cluster_name: str, layout: Plan, split: str, shares: str | None,
                   local_steps: str | None, engine: str | None) -> MixedEstimate:
    """The estimate ``plait estimate`` prints for a mixed cluster: the given shares, or the balanced ones."""
    from plait.cli.options import DEFAULT_MODEL
    from plait.search.hetero_split import balance_data, balance_pipeline

    cluster = resolve_any_cluster(cluster_name)
    assert isinstance(cluster, MixedCluster)
    model: ModelSpec = resolve_model(model_name or DEFAULT_MODEL)
    eng = get_engine(engine or DEFAULT_ENGINE)
    parts = mixed_shares(cluster, split, shares, local_steps)
    if shares:
        return estimate_mixed(model, cluster, MixedPlan(plan=layout, split=split, shares=tuple(parts)), engine=eng)
    if split == "pipeline":
        best = balance_pipeline(model, cluster, layout, eng, 64)
        if best is None:
            raise ConfigError(f"a pipeline split needs pp to be a multiple of the {len(cluster.groups)} groups with whole "
                              f"stages on each, vpp=1 and a dense model (got {layout.describe()}); or give --shares")
        return best
    local = layout.global_batch // layout.dp
    even = [GroupShare(group=s.group, num_gpus=s.num_gpus, local_steps=s.local_steps,
                       batch=s.num_gpus // layout.model_parallel * local) for s in parts]
    est = estimate_mixed(model, cluster, MixedPlan(plan=layout, split="data", shares=tuple(even)), engine=eng)
    return est if any(s.local_steps > 1 for s in parts) else balance_data(model, cluster, est, eng, 64)


def print_mixed(est: MixedEstimate, as_json: bool, train_tokens: float) -> None:
    """Print one mixed estimate."""
    if as_json:
        print_json(mixed_to_dict(est, train_tokens))
    else:
        print_mixed_estimate(Console(), est, train_tokens)


def mixed_plan(model_name: str, cluster_name: str, global_batch: int, engine: str | None, top: int,
               memory_margin: float, as_json: bool) -> None:
    """``plait plan`` on a mixed cluster: the ranked mixed plans against the best single group."""
    from plait.search.hetero import plan_mixed

    cluster = resolve_any_cluster(cluster_name)
    assert isinstance(cluster, MixedCluster)
    model = resolve_model(model_name)
    result = plan_mixed(model, cluster, global_batch, engine=get_engine(engine or DEFAULT_ENGINE),
                        memory_margin=memory_margin)
    if as_json:
        best = result.best_baseline
        print_json({"plans": [mixed_to_dict(e) for e in result.plans[:top]],
                    "even": mixed_to_dict(result.even) if result.even else None,
                    "baselines": {g: e.to_dict() | {"usd_per_million_tokens": usd_per_million(e)}
                                  for g, e in result.baselines.items()},
                    "best_baseline": best[0] if best else None})
    else:
        print_mixed_search(Console(), result, top)


def usd_per_million(est: object) -> float:
    """Money per million all-reduce-equivalent tokens of a homogeneous estimate."""
    from plait.cost.estimate import Estimate

    assert isinstance(est, Estimate)
    return est.cost_usd(1e6)

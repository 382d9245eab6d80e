"""A diffusion-transformer inference job: a DiT TOML, a cluster, GPUs and a parallel plan, costed by
:mod:`plait.workloads.dit.cost`; or every plan of the GPUs searched for the lowest latency under the memory limit."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.units import GIB
from plait.workloads.dit.cost import DitEstimate, DitPlan, estimate_dit
from plait.workloads.dit.model import DitJob, DitSpec
from plait.workloads.dit.pipeline import EndToEnd, end_to_end

KEYS = tuple(f.name for f in fields(DitPlan))


def parse_dit_plan(text: str) -> DitPlan:
    """``cfg=2,ulysses=2,ring=2`` (keys: cfg, pipefusion, patches, ulysses, ring, tp, distrifusion, offload)."""
    values: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, eq, value = item.partition("=")
        if not eq or key.strip() not in KEYS:
            raise ConfigError(f"parallel {item!r} must read KEY=N with KEY one of {', '.join(KEYS)}")
        try:
            values[key.strip()] = int(value)
        except ValueError:
            raise ConfigError(f"parallel {item!r}: {value!r} must be a whole number") from None
    if values.get("pipefusion", 1) > 1 and "patches" not in values:
        values["patches"] = values["pipefusion"]
    return DitPlan(**values)


@dataclass(frozen=True, kw_only=True)
class DitPrediction:
    """One DiT job under one plan."""

    spec: DitSpec
    job: DitJob
    cluster: Cluster
    plan: DitPlan
    estimate: DitEstimate
    end_to_end: EndToEnd

    def to_dict(self) -> dict[str, Any]:
        est = self.estimate
        return {"model": self.spec.name, "cluster": self.cluster.name, "gpus": self.plan.gpus,
                "plan": {k: getattr(self.plan, k) for k in KEYS}, "stale_activations": self.plan.stale,
                "resolution": self.job.resolution, "steps": self.job.steps, "batch": self.job.batch,
                "cfg": self.job.cfg, "image_tokens": self.job.image_tokens(self.spec),
                "step_time_s": est.step_s, "compute_s": est.compute_s, "exposed_comm_s": est.comm_s,
                "latency_s": est.latency_s, "images_per_s": self.job.batch / est.latency_s,
                "memory_bytes": est.memory_bytes, "weight_bytes": est.weight_bytes, "buffer_bytes": est.buffer_bytes,
                "frames": self.job.frames, "compiled": self.job.compiled, "cache_skip": self.job.cache_skip,
                "text_encode_s": self.end_to_end.text_encode_s, "host_step_s": self.end_to_end.host_step_s,
                "vae_decode_s": self.end_to_end.vae_decode_s, "postprocess_s": self.end_to_end.postprocess_s,
                "end_to_end_s": self.end_to_end.total_s}


def predict_dit(spec: DitSpec, job: DitJob, hardware: Cluster, plan: DitPlan) -> DitPrediction:
    """The job under ``plan`` (:func:`plait.workloads.dit.cost.estimate_dit`)."""
    est = estimate_dit(spec, job, plan, hardware)
    return DitPrediction(spec=spec, job=job, cluster=hardware, plan=plan, estimate=est,
                         end_to_end=end_to_end(spec, job, plan, hardware, est))


def candidate_plans(gpus: int, cfg: bool, tokens: int) -> list[DitPlan]:
    """Every way to spend ``gpus`` on CFG (2 when guidance is on), PipeFusion (with 1, 2 or 4 patches per stage),
    Ulysses x ring, tensor parallelism, or DistriFusion; :func:`plait.workloads.dit.cost.check_plan` refuses the rest."""
    out = []
    for c in (1, 2) if cfg else (1,):
        if gpus % c:
            continue
        rest = gpus // c
        out += [DitPlan(cfg=c, tp=rest), DitPlan(cfg=c, distrifusion=rest)] if rest > 1 else [DitPlan(cfg=c)]
        for p in _divisors(rest):
            for u in _divisors(rest // p):
                ring = rest // p // u
                if p == 1:
                    out.append(DitPlan(cfg=c, ulysses=u, ring=ring))
                else:
                    out += [DitPlan(cfg=c, pipefusion=p, patches=p * k, ulysses=u, ring=ring) for k in (1, 2, 4)
                            if tokens % (p * k * u * ring) == 0]
    out += [replace(plan, offload=1) for plan in out if not plan.stale]  # memory for time, where weights bind
    return list(dict.fromkeys(out))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def search_dit(spec: DitSpec, job: DitJob, hardware: Cluster, gpus: int, memory_margin: float = 0.05
               ) -> tuple[list[DitPrediction], list[tuple[DitPlan, str]]]:
    """Plans that fit, lowest latency end to end first (:mod:`plait.workloads.dit.pipeline`), and the refused with
    why."""
    limit = (1.0 - memory_margin) * hardware.accelerator.memory_bytes
    ranked, refused = [], []
    for plan in candidate_plans(gpus, job.cfg, job.image_tokens(spec)):
        try:
            est = estimate_dit(spec, job, plan, hardware)
        except ConfigError as error:
            refused.append((plan, str(error)))
            continue
        if est.memory_bytes > limit:
            refused.append((plan, f"needs {est.memory_bytes / GIB:.1f} GiB of {limit / GIB:.1f} GiB usable"))
        else:
            ranked.append(DitPrediction(spec=spec, job=job, cluster=hardware, plan=plan, estimate=est,
                                        end_to_end=end_to_end(spec, job, plan, hardware, est)))
    ranked.sort(key=lambda r: (r.end_to_end.total_s, r.estimate.memory_bytes))
    return ranked, refused

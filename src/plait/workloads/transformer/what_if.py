"""``plait estimate --what-if``: the transformer's estimate beside a what-if of hardware features no GPU has today."""

from __future__ import annotations

from plait.cost.estimate import Estimate
from plait.cost.kitsune import WHAT_IFS, KitsuneWhatIf, kitsune_what_if, traffic_saved
from plait.cost.setup import Setup
from plait.errors import ConfigError
from plait.predict.estimate import predict
from plait.workloads import Options, Workload
from plait.workloads.transformer.estimate import job


def check_what_if(name: str, workload: Workload, mixed: bool) -> None:
    """Refuse an unknown what-if, or one for a workload or cluster it does not cost (``mixed``: a mixed cluster)."""
    if name not in WHAT_IFS:
        raise ConfigError(f"--what-if {name!r} must be one of {', '.join(WHAT_IFS)}")
    if workload.kind.name != "transformer":
        raise ConfigError(f"--what-if {name} costs transformer layers; --model {workload.source!r} is a "
                          f"{workload.kind.label}")
    if mixed:
        raise ConfigError(f"--what-if {name} costs one device type's layers; give a homogeneous --cluster")


def price_with_what_if(workload: Workload, options: Options) -> tuple[Estimate, KitsuneWhatIf]:
    """The estimate (as ``plait estimate`` prices it) and its Kitsune what-if."""
    the_job = job(workload, options)
    estimate = predict(the_job, simulate=options["simulate"])
    setup = Setup(model=the_job.model, cluster=the_job.cluster, plan=the_job.plan, framework=the_job.framework)
    return estimate, kitsune_what_if(setup, estimate)


def what_if_line(w: KitsuneWhatIf) -> str:
    """One line that says what it is: a what-if, not the prediction."""
    low, high = w.speedups
    step = f"{w.step_low_saving_s:.4g}-{w.step_high_saving_s:.4g} s ({low:.2f}-{high:.2f}x"
    if f"{low:.2f}" == f"{high:.2f}":  # compute-bound layers: the traffic saved does not show
        step = f"{w.step_low_saving_s:.4g} s ({low:.2f}x"
    return (f"WHAT-IF (not a prediction; GPU features no GPU has today): with Kitsune's spatial pipelines "
            f"(arXiv 2502.18403) the step would take {step}; the paper reports 1.1-2.4x in training), at its "
            "16-42% off-chip traffic saving")


def what_if_json(w: KitsuneWhatIf) -> dict[str, object]:
    """The what-if as JSON, labelled."""
    return {"what_if": "kitsune", "not_a_prediction": True, "step_time_s": [w.step_low_saving_s,
                                                                            w.step_high_saving_s],
            "speedup": list(w.speedups), "traffic_saved": [f.value for f in traffic_saved()], "layer_ratio": list(w.layer_ratio),
            "source": "arXiv 2502.18403 (Kitsune); plait.cost.kitsune"}

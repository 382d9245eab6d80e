"""The measured runs plait ships (``plait/validate/data``, package data: a pip install carries them), by name.

``plait validate dev`` is ``plait validate --runs`` on the shipped ``dev.csv``; each name belongs to one of
``plait validate``'s options. Sources and caveats: the ``.md`` file beside each CSV; the runs' schema:
``data/README.md``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from plait.errors import ConfigError, did_you_mean

DATASETS: dict[str, tuple[str, str]] = {
    "dev": ("runs", "dev.csv"),
    "small": ("runs", "small_runs.csv"),
    "torchtitan": ("runs", "torchtitan_runs.csv"),
    "memory": ("memory", "memory_runs.csv"),
    "classic": ("classic", "classic_dp.csv"),
    "dit": ("dit", "dit_latency.csv"),
    "gnn": ("gnn", "gnn_epochs.csv"),
    "dlrm": ("dlrm", "dlrm_steps.csv"),
}
"""Name -> (the ``plait validate`` option that reads it, its file in ``data/``)."""


def dataset_path(name: str) -> Path:
    """The shipped CSV called ``name`` (one of :data:`DATASETS`)."""
    if name not in DATASETS:
        raise ConfigError(f"unknown dataset {name!r}{did_you_mean(name, DATASETS)} (shipped: {', '.join(DATASETS)}; "
                          "or give a CSV file to --runs, --memory, --classic, --dit, --gnn or --dlrm)")
    return Path(str(resources.files("plait.validate").joinpath("data").joinpath(DATASETS[name][1])))


def option_path(option: str, value: Path | None) -> Path | None:
    """``value`` of ``plait validate --OPTION``: a file as given, or the shipped dataset of that option named
    ``value`` where no such file exists (``--runs dev``)."""
    if value is None or value.exists():
        return value
    shipped = next((name for name, (opt, _) in DATASETS.items() if opt == option and name == str(value)), None)
    return dataset_path(shipped) if shipped is not None else value


def model_path(csv: Path, name: str) -> Path | None:
    """The model file a row of ``csv`` names: beside the CSV, in a ``models`` folder beside it, or one of the
    shipped validation models (``plait/validate/data/models``), the first that exists; ``None`` if none does."""
    shipped = dataset_path("dlrm").parent / "models"
    return next((p for p in (csv.parent / name, csv.parent / "models" / name, shipped / name) if p.is_file()), None)

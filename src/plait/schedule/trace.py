"""A trace of training jobs: who arrives when, training which catalog model, on how many GPUs, for how many tokens.

The CSV file has the columns ``job_id,arrival_s,model,gpus,tokens[,deadline_s]`` (header required, in that order).
It is read once here (STYLE.md rule 4); a bad row is one :class:`ConfigError` naming the row, the value and the rule.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

from plait.errors import ConfigError, read_user_file
from plait.workload.catalog import model_names

COLUMNS = ("job_id", "arrival_s", "model", "gpus", "tokens")
"""The required columns, in order; ``deadline_s`` may follow."""
MAX_GPUS = 2**31 - 1
"""Largest GPU count a row may ask (the simulator's columns hold it in a machine integer; a job larger than its
cluster is rejected when it arrives)."""
DEADLINE = "deadline_s"


@dataclass(frozen=True, kw_only=True)
class TraceJob:
    """One training job as submitted."""

    job_id: str
    """The job's name, unique in its trace."""
    arrival_s: float
    """Submission time, seconds from the start of the trace."""
    model: str
    """Catalog model it trains (``plait models``)."""
    gpus: int
    """GPUs it asks for (the size FIFO, SRTF, LAS and consolidation run it at; elastic resizes from it)."""
    tokens: float
    """Tokens it trains before it completes (its work; its speed at each size comes from plait's planner)."""
    deadline_s: float | None = None
    """Time by which it should complete, seconds from the start of the trace (``None``: none); reported as met or
    missed, no policy here orders by it."""


def _number(row: int, name: str, text: str, *, integer: bool = False) -> float:
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        kind = "a whole number" if integer else "a number"
        raise ConfigError(f"trace row {row}: {name}={text!r} must be {kind}") from None
    if not math.isfinite(value):
        raise ConfigError(f"trace row {row}: {name}={text!r} must be finite")
    return value


def _job(row: int, cells: list[str], header: tuple[str, ...], known: set[str]) -> TraceJob:
    if len(cells) != len(header):
        raise ConfigError(f"trace row {row}: has {len(cells)} cells, the header names {len(header)}")
    fields = dict(zip(header, (c.strip() for c in cells), strict=True))
    arrival = _number(row, "arrival_s", fields["arrival_s"])
    gpus = int(_number(row, "gpus", fields["gpus"], integer=True))
    tokens = _number(row, "tokens", fields["tokens"])
    if not fields["job_id"]:
        raise ConfigError(f"trace row {row}: job_id is empty; every job needs a name")
    if arrival < 0:
        raise ConfigError(f"trace row {row}: arrival_s={fields['arrival_s']} must be >= 0")
    if not 1 <= gpus <= MAX_GPUS:
        raise ConfigError(f"trace row {row}: gpus={fields['gpus']} must be in [1, {MAX_GPUS}]")
    if tokens <= 0:
        raise ConfigError(f"trace row {row}: tokens={fields['tokens']} must be > 0")
    if fields["model"] not in known:
        raise ConfigError(f"trace row {row}: model={fields['model']!r} is not in the catalog (see `plait models`)")
    deadline = None
    if fields.get(DEADLINE):
        deadline = _number(row, DEADLINE, fields[DEADLINE])
        if deadline <= arrival:
            raise ConfigError(f"trace row {row}: deadline_s={fields[DEADLINE]} must be after arrival_s={arrival:g}")
    return TraceJob(job_id=fields["job_id"], arrival_s=arrival, model=fields["model"], gpus=gpus, tokens=tokens,
                    deadline_s=deadline)


def parse_trace(text: str, where: str) -> tuple[TraceJob, ...]:
    """The jobs of a trace CSV ``text`` (``where`` names it in errors), in order of arrival."""
    rows = list(csv.reader(io.StringIO(text)))
    header = tuple(h.strip() for h in rows[0]) if rows else ()
    if header not in (COLUMNS, (*COLUMNS, DEADLINE)):
        raise ConfigError(f"trace {where}: header {','.join(header)!r} must be {','.join(COLUMNS)}[,{DEADLINE}]")
    known, jobs, seen = set(model_names()), [], set()
    for number, cells in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in cells):
            continue
        job = _job(number, cells, header, known)
        if job.job_id in seen:
            raise ConfigError(f"trace row {number}: job_id={job.job_id!r} appears twice; ids must be unique")
        seen.add(job.job_id)
        jobs.append(job)
    if not jobs:
        raise ConfigError(f"trace {where}: has no jobs")
    return tuple(sorted(jobs, key=lambda j: (j.arrival_s, j.job_id)))


def read_trace(path: Path) -> tuple[TraceJob, ...]:
    """The jobs of the trace CSV at ``path``."""
    return parse_trace(read_user_file(path, "trace"), repr(str(path)))


def trace_csv(jobs: tuple[TraceJob, ...]) -> str:
    """``jobs`` as trace CSV text (the deadline column only when a job has one); :func:`parse_trace` reads it back."""
    with_deadline = any(j.deadline_s is not None for j in jobs)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow((*COLUMNS, DEADLINE) if with_deadline else COLUMNS)
    for j in jobs:
        row = [j.job_id, f"{j.arrival_s:.3f}", j.model, j.gpus, f"{j.tokens:.6g}"]
        writer.writerow(row + ([f"{j.deadline_s:.3f}" if j.deadline_s is not None else ""] if with_deadline else []))
    return out.getvalue()

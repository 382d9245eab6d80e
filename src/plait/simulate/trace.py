"""Chrome / Perfetto trace-event JSON of a simulated step.

Format: the Trace Event Format (Google, "Trace Event Format" document, JSON Object Format):
``{"traceEvents": [...], "displayTimeUnit": "ms"}`` with complete events (``ph: "X"``,
``ts``/``dur`` in microseconds) and metadata events (``ph: "M"``) naming each process
(one per rank) and thread (one per stream).
"""

from __future__ import annotations

import json
from pathlib import Path

from plait.errors import refuse_overwrite
from plait.simulate.pipeline import Timeline

STREAMS = {"compute": 0, "comm": 1, "host": 2}
LABELS = {"F": "forward", "B": "backward", "W": "weight-grad", "optimizer": "optimizer",
          "dp-reduce": "grad reduce", "param-gather": "param all-gather"}


def trace_events(timeline: Timeline) -> dict[str, object]:
    """The trace as a JSON-ready object."""
    events: list[dict[str, object]] = []
    ranks = sorted({s.rank for s in timeline.spans})
    used = {s.stream for s in timeline.spans} | {"compute", "comm"}  # a host lane only where one is drawn
    for rank in ranks:
        events.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}})
        for stream, tid in ((s, t) for s, t in STREAMS.items() if s in used):
            events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": stream}})
    for span in timeline.spans:
        name = LABELS.get(span.kind, span.kind)
        if span.micro_batch >= 0:
            name += f" mb{span.micro_batch}" + (f" c{span.chunk}" if span.chunk else "")
        events.append({"ph": "X", "name": name, "cat": span.kind, "pid": span.rank, "tid": STREAMS[span.stream],
                       "ts": span.start * 1e6, "dur": (span.end - span.start) * 1e6,
                       "args": {"micro_batch": span.micro_batch, "chunk": span.chunk}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"step_time_s": timeline.step_time_s, "producer": "plait simulate"}}


def write_trace(path: Path, timeline: Timeline, *, overwrite: bool = False) -> None:
    """Write the trace; refuses to replace an existing file unless ``overwrite``."""
    refuse_overwrite(path, overwrite)
    path.write_text(json.dumps(trace_events(timeline)), encoding="utf-8")

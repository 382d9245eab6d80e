"""The cluster's schedule as a Chrome/Perfetto trace (JSON Trace Event Format, "X" complete events).

One process per node, one thread per lane of that node: each job's GPUs on a node are one slice, named after the
job, laid in the first lane free over its interval (greedy interval colouring, so slices on one thread never overlap
and Perfetto draws them side by side). Time is in microseconds of simulated time. Open in https://ui.perfetto.dev.
"""

from __future__ import annotations

from typing import Any

from plait.schedule.result import ScheduleResult

US_PER_S = 1e6


def _lanes(segments: list[Any]) -> list[int]:
    """The lane of each segment of one node (by start), the first whose last slice has ended."""
    ends: list[float] = []
    lanes = []
    for seg in segments:
        lane = next((i for i, end in enumerate(ends) if end <= seg.start_s), len(ends))
        if lane == len(ends):
            ends.append(seg.end_s)
        else:
            ends[lane] = seg.end_s
        lanes.append(lane)
    return lanes


def chrome_trace(result: ScheduleResult) -> dict[str, Any]:
    """The trace document of ``result``."""
    events: list[dict[str, Any]] = []
    by_node: dict[int, list[Any]] = {}
    for seg in sorted(result.segments, key=lambda s: (s.node, s.start_s, s.job_id)):
        by_node.setdefault(seg.node, []).append(seg)
    for node, segments in sorted(by_node.items()):
        events.append({"ph": "M", "name": "process_name", "pid": node, "args": {"name": f"node {node}"}})
        for seg, lane in zip(segments, _lanes(segments), strict=True):
            start_us, end_us = seg.start_s * US_PER_S, seg.end_s * US_PER_S  # dur from the scaled ends, so that
            events.append({"ph": "X", "name": seg.job_id, "pid": node, "tid": lane, "ts": start_us,  # ts + dur
                           "dur": end_us - start_us, "args": {"gpus": seg.gpus}})  # lands on the next slice's ts
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"policy": result.policy, "capacity_gpus": result.capacity_gpus}}

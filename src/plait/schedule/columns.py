"""Every job's progress as numpy columns, so that a policy pass over thousands of running jobs is a few array
operations instead of a Python loop (STYLE.md rule 9: speed is a feature).

The columns mirror :class:`plait.schedule.state.JobState` (the truth) and are written whenever the simulator starts,
stops or completes a job; between those events a job's progress is linear in time, so its tokens left and service
attained at any instant follow from them with the same float operations as :meth:`JobState.remaining` and
:meth:`JobState.attained`, bit for bit (IEEE arithmetic is the same in numpy and Python).
"""

from __future__ import annotations

import numpy as np

from plait.schedule.state import JobState


class Columns:
    """Per-job arrays, indexed by trace position."""

    def __init__(self, states: list[JobState]) -> None:
        n = len(states)
        self.arrival_s = np.array([st.job.arrival_s for st in states], dtype=np.float64)
        """Submission times."""
        self.arrival_rank = np.empty(n, dtype=np.int64)
        """Each job's place in the order of (arrival, trace position): the policies' tie-break as one key."""
        self.arrival_rank[np.lexsort((np.arange(n), self.arrival_s))] = np.arange(n)
        self.asked_gpus = np.array([st.job.gpus for st in states], dtype=np.int64)
        """GPUs each job asks for."""
        self._rank_rows = np.zeros((n, 4))
        """Per job, the four inputs of its time left (:meth:`rank`) side by side, so that a pass gathers one row of
        32 bytes per job instead of four floats from four arrays (the columns below are views of it)."""
        self._rank_rows[:, 3] = 1.0
        self.trains_from_s = self._rank_rows[:, 0]
        """``max(since_s, training_from_s)``: when it trains again."""
        self.tokens_per_s = self._rank_rows[:, 1]
        """Speed now (0 unless running)."""
        self.remaining_tokens = self._rank_rows[:, 2]
        """:attr:`JobState.remaining_tokens`."""
        self.asked_tokens_per_s = self._rank_rows[:, 3]
        """Speed at the requested size, consolidated (set on arrival; SRTF's yardstick)."""
        self.attained_gpu_s = np.zeros(n)
        """:attr:`JobState.attained_gpu_s`."""
        self.since_s = np.zeros(n)
        """:attr:`JobState.since_s`."""
        self.gpus = np.zeros(n, dtype=np.int64)
        """GPUs held now (0 unless running)."""

    def write(self, st: JobState) -> None:
        """Mirror ``st`` after the simulator changed it."""
        i = st.index
        self.remaining_tokens[i] = st.remaining_tokens
        self.attained_gpu_s[i] = st.attained_gpu_s
        self.since_s[i] = st.since_s
        self.trains_from_s[i] = max(st.since_s, st.training_from_s)
        self.tokens_per_s[i] = st.speed.tokens_per_s if st.speed is not None else 0.0
        self.gpus[i] = st.gpus

    def remaining(self, idx: np.ndarray, now_s: float) -> np.ndarray:
        """Tokens left at ``now_s`` of jobs ``idx``, an array of indices (as :meth:`JobState.remaining`; a new
        array)."""
        trained = np.subtract(now_s, self.trains_from_s[idx])  # the same operations in place (fewer arrays made)
        np.maximum(0.0, trained, out=trained)
        trained *= self.tokens_per_s[idx]
        left = self.remaining_tokens[idx]
        left -= trained
        return np.maximum(0.0, left, out=left)

    def rank(self, idx: np.ndarray, now_s: float) -> np.ndarray:
        """Time left at the requested size at ``now_s`` of jobs ``idx`` (SRTF's rank): :meth:`remaining` divided by
        :attr:`asked_tokens_per_s`, the same operations on one gather of rows (a new array)."""
        trains_from, tokens_per_s, left, asked = self._rank_rows.take(idx, axis=0).T
        trained = np.subtract(now_s, trains_from)
        np.maximum(0.0, trained, out=trained)
        trained *= tokens_per_s
        left = left - trained
        np.maximum(0.0, left, out=left)
        left /= asked
        return left

    def attained(self, idx: np.ndarray, now_s: float) -> np.ndarray:
        """GPU-seconds held up to ``now_s`` by jobs ``idx`` (as :meth:`JobState.attained`)."""
        return self.attained_gpu_s[idx] + self.gpus[idx] * np.maximum(0.0, now_s - self.since_s[idx])

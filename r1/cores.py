"""Sharing the machine: as many torch threads as there are cores nobody else is using.

Two trainings on two cores do not share, they thrash: each keeps two OpenMP threads that spin at
every barrier while the other process holds the core the barrier waits for. Measured on these
machines with the default recipe's GRPO stage (20 steps): alone with 2 threads 10.7 s; two at
once with 2 threads each 47-49 s each (4.3x); 1 thread alone 14.7 s and two 1-thread runs at once
14.8 / 15.5 s. ``OMP_WAIT_POLICY=PASSIVE`` shares well (17 s each at once) but makes a run alone
as slow as one thread (15 s), and shorter spin counts thrash worse.

So a trainer re-counts the cores other processes keep busy (from ``/proc/stat`` minus its own
CPU time) every few seconds and runs ``cores - busy`` threads, at least one and at most what the
recipe asked for: alone it keeps its two threads, beside another training both settle on one
each, and the survivor takes both back when the other ends. Linux only; elsewhere the thread
count is left as set.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_PROC_STAT = Path("/proc/stat")
_SELF_STAT = Path("/proc/self/stat")


def _cpu_jiffies() -> tuple[int, int] | None:
    """(busy, total) jiffies of the whole machine, or None where /proc is not Linux's."""
    try:
        fields = [int(x) for x in _PROC_STAT.read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _self_jiffies() -> int | None:
    try:
        rest = _SELF_STAT.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(rest[11]) + int(rest[12])  # utime + stime (fields 14 and 15)


class CoreShare:
    """Decides this process's thread count from what the rest of the machine is using."""

    def __init__(self, max_threads: int, cores: int | None = None) -> None:
        self.max_threads = max(1, max_threads)
        self.cores = cores or os.cpu_count() or 1
        self._last = (_cpu_jiffies(), _self_jiffies(), time.monotonic())

    def others_busy(self) -> float | None:
        """Cores other processes kept busy since the last call (None when it cannot be measured)."""
        machine, mine, t = _cpu_jiffies(), _self_jiffies(), time.monotonic()
        (m0, s0, _), self._last = self._last, (machine, mine, t)
        if machine is None or mine is None or m0 is None or s0 is None or machine[1] == m0[1]:
            return None
        busy = (machine[0] - m0[0]) - (mine - s0)
        return max(0.0, self.cores * busy / (machine[1] - m0[1]))

    def threads(self) -> int | None:
        """Threads to run now: the cores left free, rounded down past half a core, within [1, max]."""
        busy = self.others_busy()
        if busy is None:
            return None
        return min(self.max_threads, max(1, int(self.cores - busy + 0.5)))


_MAX_THREADS: int | None = None  # what the run asked for (Runtime.num_threads or torch's default)
_SHARE: CoreShare | None = None
_LAST_CHECK = 0.0


def set_max_threads(n: int) -> None:
    """The thread count a run asked for; :func:`adapt` never goes above it."""
    global _MAX_THREADS, _SHARE
    _MAX_THREADS, _SHARE = n, None


def adapt(every_s: float = 2.0) -> None:
    """Set torch's thread count to the cores other processes leave free (at most every ``every_s``).

    Trainers call it after each step (:class:`ShareCores`), generation between batches.
    ``R1_SHARE_CORES=0`` turns it off (to measure what it buys: ``bench/sharing.py``).
    """
    global _SHARE, _LAST_CHECK
    import torch

    if os.environ.get("R1_SHARE_CORES") == "0" or time.monotonic() - _LAST_CHECK < every_s:
        return
    _LAST_CHECK = time.monotonic()
    if _SHARE is None:
        _SHARE = CoreShare(_MAX_THREADS or torch.get_num_threads())
        return  # the first call only starts the measurement
    n = _SHARE.threads()
    if n is not None and n != torch.get_num_threads():
        torch.set_num_threads(n)


class ShareCores:
    """A ``TrainerCallback`` that calls :func:`adapt` after every step."""

    def __new__(cls):
        from transformers import TrainerCallback

        class _Share(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                adapt()

        return _Share()

"""Progress lines every stage shares: the running stage's label, elapsed time, an ETA, verbosity.

A stage's loops (trainer steps, generation batches, shards) report through :class:`Meter`,
which prefixes the stage label, adds elapsed time and an ETA from the rate so far (a resumed
loop counts only what it did itself), and prints nothing under ``--quiet``. The runner sets the
label around each stage (:func:`stage`); the level comes from ``R1_PROGRESS`` (``quiet``,
``normal``, ``verbose``), which the CLI sets and an ``accelerate launch``'s ranks inherit.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import time
from collections.abc import Iterator

_LABEL: contextvars.ContextVar[str] = contextvars.ContextVar("r1_stage_label", default="stage")
LEVELS = ("quiet", "normal", "verbose")


@contextlib.contextmanager
def stage(label: str) -> Iterator[None]:
    """Name the stage running inside: its progress lines and tracking runs carry the label."""
    token = _LABEL.set(label or "stage")
    try:
        yield
    finally:
        _LABEL.reset(token)


def label() -> str:
    """The running stage's label (``stage`` outside one)."""
    return _LABEL.get()


def level() -> str:
    """``quiet`` (status and result lines only), ``normal`` or ``verbose`` (every progress line)."""
    value = os.environ.get("R1_PROGRESS", "normal")
    return value if value in LEVELS else "normal"


def duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``1h02m``: short enough for a progress line."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Meter:
    """Progress of one loop of ``total`` units, ``done`` of which were done before it started.

    ``update`` prints ``[label] <unit> 120/800  <extra>  1m05s, ETA 6m08s`` when ``every`` units
    passed since the last line or ``interval`` seconds (``verbose``: every update), and always at
    the end; ``line`` builds the text without printing (for callers that print it themselves).
    """

    def __init__(
        self,
        total: int,
        done: int = 0,
        unit: str = "step",
        every: int = 1,
        interval: float = 0.0,
        name: str | None = None,
    ):
        self.total, self.first, self.unit, self.name = total, done, unit, name
        self.every, self.interval = every, interval
        self.start = time.monotonic()
        self._last_done, self._last_time = done, self.start

    def line(self, done: int, extra: str = "") -> str:
        elapsed = time.monotonic() - self.start
        timing = duration(elapsed)
        if self.first < done < self.total:
            rate = (done - self.first) / max(elapsed, 1e-9)
            timing += f", ETA {duration((self.total - done) / rate)}"
        parts = [f"[{self.name or label()}] {self.unit} {done}/{self.total}", extra, timing]
        return "  ".join(p for p in parts if p)

    def update(self, done: int, extra: str = "") -> None:
        now = time.monotonic()
        due = (
            done >= self.total
            or level() == "verbose"
            or done - self._last_done >= self.every
            or (self.interval and now - self._last_time >= self.interval)
        )
        if level() == "quiet" or not due:
            return
        self._last_done, self._last_time = done, now
        print(self.line(done, extra), flush=True)

"""Answer extraction and equivalence, with a hard time bound.

math-verify is the field's answer checker (``1,000`` = ``1000``, ``\\frac12`` = ``0.5``), but it
bounds its own time with ``signal.alarm``, which fails off the main thread (Prefect runs tasks in
threads), and sympy can hang on a hostile model output. So checks that need sympy run in one
long-lived worker process that is killed and restarted when a check overruns its budget; plain
numbers (the common case in RL on arithmetic) are compared directly and never leave the process.
"""

from __future__ import annotations

import json
import logging
import re
import select
import subprocess
import sys
import threading
from decimal import Decimal, InvalidOperation
from pathlib import Path

log = logging.getLogger(__name__)

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_NUMBER = re.compile(r"^[+-]?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?$")
DEFAULT_TIMEOUT_S = 5.0


def extract_answer(text: str) -> str | None:
    """The content of the last ``<answer>...</answer>``, else of the last ``\\boxed{...}``."""
    found = _ANSWER.findall(text)
    if found:
        return found[-1].strip()
    return _last_boxed(text)


def _last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` with balanced braces (regex cannot nest)."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j].strip()
    return None


def _as_number(text: str) -> Decimal | None:
    """A plain decimal number (thousands separators allowed), else None."""
    s = text.strip().strip("$").strip()
    if not _NUMBER.match(s):
        return None
    try:
        return Decimal(s.replace(",", ""))
    except InvalidOperation:
        return None


def _serve() -> None:
    """Worker loop: read JSON ``[gold, pred]`` lines on stdin, answer ``1``/``0`` lines with math-verify."""
    from math_verify import parse, verify

    # We bound the time ourselves (this process is killed), so math-verify's notice is noise.
    logging.getLogger("math_verify").setLevel(logging.ERROR)

    def _parse(s: str):
        parsed = parse(s, parsing_timeout=None)
        return parsed if parsed else parse(f"${s}$", parsing_timeout=None)

    for line in sys.stdin:
        try:
            gold, pred = json.loads(line)
            ok = bool(verify(_parse(gold), _parse(pred), timeout_seconds=None))
        except Exception:  # a malformed answer is simply not equivalent
            ok = False
        sys.stdout.write("1\n" if ok else "0\n")
        sys.stdout.flush()


class _Verifier:
    """One worker process shared by all threads; restarted after a timeout or a crash.

    The worker is a plain subprocess (``python -m r1.answers``), not multiprocessing: spawn and
    forkserver re-import the caller's ``__main__``, which re-runs an unguarded user script.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._warm = False  # the first check also pays the worker's import of sympy

    def _start(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "r1.answers"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
            cwd=str(Path(__file__).resolve().parent.parent),
        )

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(timeout=5)
        self._proc = None
        self._warm = False

    def check(self, gold: str, pred: str, timeout_s: float) -> bool:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            try:
                self._proc.stdin.write(json.dumps([gold, pred]) + "\n")
                self._proc.stdin.flush()
                ready, _, _ = select.select(
                    [self._proc.stdout], [], [], timeout_s if self._warm else timeout_s + 30
                )
                if ready:
                    line = self._proc.stdout.readline()
                    if line:
                        self._warm = True
                        return line.strip() == "1"
                    log.warning("math-verify worker died on %r; counted as wrong", pred[:80])
                else:
                    log.warning(
                        "math-verify timed out after %.1fs on %r; counted as wrong", timeout_s, pred[:80]
                    )
            except (BrokenPipeError, OSError):
                log.warning("math-verify worker died on %r; counted as wrong", pred[:80])
            self._kill()
            return False


_VERIFIER = _Verifier()


def answers_match(gold: str, pred: str | None, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """True when ``pred`` is mathematically equivalent to ``gold``; never blocks past the bound."""
    if pred is None or not pred.strip():
        return False
    g, p = _as_number(gold), _as_number(pred)
    if g is not None and p is not None:
        return g == p
    return _VERIFIER.check(gold, pred, timeout_s)


if __name__ == "__main__":
    _serve()

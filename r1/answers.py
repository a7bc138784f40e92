"""Answer extraction and equivalence, agreeing with Math-Verify, with hard time bounds.

Where the answer is. A completion's answer comes after its chain of thought: only the text after
the last ``</think>`` counts (a chain that never closes has no answer, so a ``\\boxed{}`` written
while thinking is scratch work, not the answer). There, the last ``<answer>...</answer>`` is the
answer; without one, the last ``\\boxed{...}``, or the last run of boxes joined by "and", "or"
or commas, which Math-Verify reads as one set (``\\boxed{(2,2)}`` and ``\\boxed{(6,2)}``).

What it means. The extracted answer is one mathematical object, parsed whole: ``3\\sqrt{13}`` is
``3*sqrt(13)``, never its first number. Math-Verify's extractors look for the *last* expression in
free text, which is right for a whole solution but wrong for an answer field: a gold
``3\\sqrt{13}`` would read as 3 and ``\\boxed{3}`` would score 1.0. So an answer without LaTeX
delimiters is parsed as one LaTeX expression (``$...$``), and Math-Verify's free-text extraction
is only the fallback for text that does not parse that way. An answer that hedges between
candidates (``41 or 42``) is wrong unless the reference itself is a disjunction: a policy must
not learn to list guesses.

Time. math-verify bounds its own time with ``signal.alarm``, which fails off the main thread
(Prefect runs tasks in threads), and sympy can hang on a hostile model output. So checks that need
sympy run in one long-lived worker process that is killed and replaced when a check overruns its
limit; every caller also passes a deadline for its whole batch, so a batch of hostile completions
stalls a training step for at most that long. Plain numbers (the common case in RL on
arithmetic) are compared directly and never leave the process. Extraction is linear in the
completion's length (no backtracking regex over model output).
"""

from __future__ import annotations

import json
import logging
import re
import select
import subprocess
import sys
import threading
import time
from decimal import Decimal, InvalidOperation
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5.0
STARTUP_TIMEOUT_S = 60.0  # the worker's import of sympy and math-verify; never a check's limit
_READY = "ready"
# Plain decimals, read as Math-Verify reads them: thousands groups (commas or spaces) only after
# a non-zero leading group of 1-3 digits; a comma before exactly two digits ("2,74") or after a
# lone zero ("0,111") is a decimal comma; any other comma separates values ("-2,1" is two answers).
_THOUSANDS = re.compile(r"^([+-]?[1-9]\d{0,2})((?:,\d{3})+|(?: \d{3})+)(\.\d+)?$")
_DECIMAL_COMMA = re.compile(r"^([+-]?(?:\d+(?=,\d{2}$)|0(?=,\d+$))),(\d+)$")
_PLAIN = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")
_DELIMITED = re.compile(r"(?<!\\)\$|\\\[|\\\(|\\boxed|\\begin\{equation")  # \$ is a dollar sign
_HEDGE = re.compile(r"(?<![A-Za-z])(?:or|either)(?![A-Za-z])|\\lor(?![A-Za-z])|或", re.IGNORECASE)


def after_thinking(text: str) -> str | None:
    """The text after the chain of thought: after the last ``</think>``; None inside an unclosed one."""
    end = text.rfind("</think>")
    if end >= 0:
        return text[end + len("</think>") :]
    return None if "<think>" in text else text


def boxed_spans(text: str) -> list[tuple[int, int, str]]:
    """Every top-level ``\\boxed{...}`` as (start, end, content), braces balanced, in one pass.

    A box that never closes ends the scan (its content is not an answer). Linear in ``text``.
    """
    spans: list[tuple[int, int, str]] = []
    pos = 0
    while (start := text.find("\\boxed{", pos)) >= 0:
        i, depth = start + len("\\boxed{"), 1
        while i < len(text) and depth:
            c = text[i]
            depth += (c == "{") - (c == "}")
            i += 1
        if depth:
            break
        spans.append((start, i, text[start + len("\\boxed{") : i - 1].strip()))
        pos = i
    return spans


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` in ``text`` (nested braces kept), else None."""
    spans = boxed_spans(text)
    return spans[-1][2] if spans else None


def _boxed_answer(text: str) -> str | None:
    """The content of a single box; with several, the text from the first to the last box.

    Math-Verify decides what several boxes mean (``\\boxed{(2,2)}`` and ``\\boxed{(6,2)}`` is one
    set; a box far after an earlier one replaces it), so the span goes to it whole.
    """
    spans = boxed_spans(text)
    if len(spans) <= 1:
        return spans[0][2] if spans else None
    return text[spans[0][0] : spans[-1][1]]


def extract_answer(text: str) -> str | None:
    """The answer of a completion: the last ``<answer>`` after thinking, else its last boxes."""
    tail = after_thinking(text)
    if tail is None:
        return None
    end = tail.rfind("</answer>")
    start = tail.rfind("<answer>", 0, end) if end >= 0 else -1
    if start >= 0:
        return tail[start + len("<answer>") : end].strip()
    return _boxed_answer(tail)


def as_number(text: str) -> Decimal | None:
    """A plain decimal number (thousands groups, a decimal comma, an exponent allowed), else None."""
    s = text.strip().strip("$").strip()
    if len(s) > 64:
        return None
    if m := _THOUSANDS.match(s):
        s = m.group(1) + m.group(2).replace(",", "").replace(" ", "") + (m.group(3) or "")
    elif m := _DECIMAL_COMMA.match(s):
        s = f"{m.group(1)}.{m.group(2)}"
    elif not _PLAIN.match(s):
        return None
    try:
        return Decimal(s)
    except InvalidOperation:
        return None


def hedges(gold: str, pred: str) -> bool:
    """True when ``pred`` offers alternatives ("41 or 42") and the reference is no disjunction."""
    return bool(_HEDGE.search(pred)) and not _HEDGE.search(gold)


def _plain(text: str) -> str:
    """A plain number in a form every parser reads (``1.5e3`` -> ``1500``); anything else as is."""
    n = as_number(text)
    return text if n is None else format(n.normalize(), "f")


def _serve() -> None:
    """Worker loop: say ``ready``, then answer JSON ``[gold, pred]`` lines with ``1``/``0``."""
    from functools import lru_cache

    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    # We bound the time ourselves (this process is killed), so math-verify's notice is noise.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    targets = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())

    @lru_cache(maxsize=4096)  # references repeat across a group's completions
    def _parse(s: str):
        if _DELIMITED.search(s):
            return parse(s, targets, parsing_timeout=None)
        whole = parse(f"${s}$", targets, parsing_timeout=None)
        return whole if whole else parse(s, targets, parsing_timeout=None)

    _parse("1")  # warm up sympy's parser before saying ready
    sys.stdout.write(_READY + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        try:
            gold, pred = json.loads(line)
            ok = bool(verify(_parse(gold), _parse(pred), timeout_seconds=None))
        except Exception:  # a malformed answer is simply not equivalent
            ok = False
        sys.stdout.write("1\n" if ok else "0\n")
        sys.stdout.flush()


class _Verifier:
    """One worker process shared by all threads; replaced after a timeout or a crash.

    The worker is a plain subprocess (``python -m r1.answers``), not multiprocessing: spawn and
    forkserver re-import the caller's ``__main__``, which re-runs an unguarded user script. A
    replacement is started as soon as a worker is killed, so its import overlaps other work; its
    start-up never counts against a check's own limit, only against the caller's deadline.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._ready = False
        self.restarts = 0

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
        self._ready = False

    def _kill(self, replace: bool) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(timeout=5)
        self._proc = None
        if replace:
            self.restarts += 1
            self._start()

    def _readline(self, wait_s: float) -> str | None:
        """One line from the worker within ``wait_s`` seconds; None on timeout or a dead worker."""
        assert self._proc is not None and self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], max(0.0, wait_s))
        if not ready:
            return None
        line = self._proc.stdout.readline()
        return line.strip() if line else None

    def _ensure_ready(self, deadline: float) -> bool:
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        if self._ready:
            return True
        wait = min(STARTUP_TIMEOUT_S, deadline - time.monotonic())
        if self._readline(wait) == _READY:
            self._ready = True
            return True
        if self._proc is not None and self._proc.poll() is not None:
            log.warning("math-verify worker failed to start; answers counted as wrong")
            self._proc = None
        return False

    def check(self, gold: str, pred: str, timeout_s: float, deadline: float) -> bool | None:
        """Equivalence by math-verify; None when the check did not finish (timeout, crash, deadline)."""
        with self._lock:
            if not self._ensure_ready(deadline):
                return None
            try:
                assert self._proc is not None and self._proc.stdin is not None
                self._proc.stdin.write(json.dumps([gold, pred]) + "\n")
                self._proc.stdin.flush()
                answer = self._readline(min(timeout_s, deadline - time.monotonic()))
            except (BrokenPipeError, OSError):
                answer = None
            if answer in ("0", "1"):
                return answer == "1"
            log.warning(
                "math-verify gave no verdict within %.1fs on %r; counted as wrong", timeout_s, pred[:80]
            )
            self._kill(replace=True)
            return None


_VERIFIER = _Verifier()


class Deadline:
    """A time budget shared by the checks of one batch (``None``: only the per-check limit)."""

    def __init__(self, seconds: float | None) -> None:
        self.at = float("inf") if seconds is None else time.monotonic() + seconds
        self.unchecked = 0  # checks that ran out of time and were counted as wrong

    def left(self) -> float:
        return self.at - time.monotonic()


def answers_match(
    gold: str, pred: str | None, timeout_s: float = DEFAULT_TIMEOUT_S, deadline: Deadline | None = None
) -> bool:
    """True when ``pred`` is mathematically equivalent to ``gold``; never blocks past the bounds."""
    if pred is None or not pred.strip() or not str(gold).strip():
        return False
    if hedges(gold, pred):
        return False
    g, p = as_number(gold), as_number(pred)
    if g is not None and p is not None:
        return g == p
    deadline = deadline or Deadline(None)
    if deadline.left() <= 0:
        deadline.unchecked += 1
        return False
    verdict = _VERIFIER.check(_plain(gold), _plain(pred), timeout_s, deadline.at)
    if verdict is None:
        deadline.unchecked += 1
    return bool(verdict)


if __name__ == "__main__":
    _serve()

"""Child processes that die with the run that started them.

A SIGKILLed process cannot stop its children: without help, a killed run leaves its launched
ranks training into the work directory the rerun resumes from, and Prefect's ephemeral API
server (about 200 MB) running forever. Two ways out, both Linux-first:

* :func:`die_with_parent` / ``--with-parent PID CMD``: the kernel signals the process when its
  parent thread exits (``PR_SET_PDEATHSIG``); right for processes started from a thread that
  lives as long as the run (the launcher of a stage).
* ``--supervise PID CMD``: a small supervisor runs CMD as its child, forwards SIGTERM/SIGINT to
  it, and stops it when process PID is gone (polled once a second); right for processes started
  from a library's short-lived threads (Prefect's server), where the parent-death signal would
  fire when that thread ends. The supervisor exits with CMD's exit status.

    python -m r1.lifetime --with-parent PID CMD...
    python -m r1.lifetime --supervise PID CMD...
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Have the kernel send ``sig`` to this process when its parent dies (Linux; elsewhere a no-op)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, sig)


def exec_with_parent(parent: int, cmd: list[str]) -> None:
    """Become ``cmd``, to be signalled when ``parent`` dies (the setting survives exec)."""
    die_with_parent()
    if os.getppid() != parent:  # it died before the line above
        sys.exit(f"r1.lifetime: parent {parent} is gone")
    os.execv(cmd[0], cmd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def supervise(owner: int, cmd: list[str], poll_s: float = 1.0) -> int:
    """Run ``cmd`` until it exits or process ``owner`` is gone; return ``cmd``'s exit status."""
    child = subprocess.Popen(cmd)

    def forward(signum, _frame) -> None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while child.poll() is None:
        if not _alive(owner):
            child.terminate()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
            break
        time.sleep(poll_s)
    return child.wait()


def supervised(cmd: list[str], owner: int | None = None) -> list[str]:
    """``cmd`` wrapped so that it stops when ``owner`` (default: this process) is gone."""
    return [sys.executable, "-m", "r1.lifetime", "--supervise", str(owner or os.getpid()), *cmd]


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "--with-parent":
        exec_with_parent(int(sys.argv[2]), sys.argv[3:])
    elif len(sys.argv) > 3 and sys.argv[1] == "--supervise":
        sys.exit(supervise(int(sys.argv[2]), sys.argv[3:]))
    else:
        sys.exit("usage: python -m r1.lifetime --with-parent PID CMD... | --supervise PID CMD...")

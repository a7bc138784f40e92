"""Sharing the machine: a run takes the cores other processes leave free, between 1 and its setting."""

from __future__ import annotations

from r1 import cores


def _feed(monkeypatch, machine: list[tuple[int, int]], mine: list[int]) -> None:
    machine_it, mine_it = iter(machine), iter(mine)
    monkeypatch.setattr(cores, "_cpu_jiffies", lambda: next(machine_it))
    monkeypatch.setattr(cores, "_self_jiffies", lambda: next(mine_it))


def test_threads_follow_what_other_processes_use(monkeypatch):
    # 2 cores, 200 jiffies per interval: (busy, total) of the machine, then this process's own use
    _feed(
        monkeypatch,
        machine=[(0, 0), (200, 200), (400, 400), (410, 600), (600, 800)],
        mine=[0, 200, 300, 310, 500],
    )
    share = cores.CoreShare(max_threads=2, cores=2)
    assert share.threads() == 2  # everything busy was this process: keep both threads
    assert share.threads() == 1  # another process kept a core busy: one thread
    assert share.threads() == 2  # the machine went idle: both again
    assert share.threads() == 2


def test_never_above_the_setting_nor_below_one(monkeypatch):
    _feed(monkeypatch, machine=[(0, 0), (800, 800), (1600, 1600)], mine=[0, 0, 0])
    share = cores.CoreShare(max_threads=1, cores=4)
    assert share.threads() == 1  # every core busy with others: still one thread
    _feed(monkeypatch, machine=[(0, 0), (0, 800)], mine=[0, 0])
    assert cores.CoreShare(max_threads=3, cores=4).threads() == 3


def test_without_proc_nothing_changes(monkeypatch):
    _feed(monkeypatch, machine=[None, None], mine=[None, None])
    assert cores.CoreShare(max_threads=2, cores=2).threads() is None

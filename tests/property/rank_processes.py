"""The no-orphans check of the tests that start rank processes: import `no_orphans` into a test module (an
autouse fixture) and every test there fails if a rank process, or a zombie, outlives it."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest


def os_children() -> set:
    """PIDs whose parent is this process, zombies included (Linux /proc); multiprocessing's own
    resource tracker, which lives as long as this process by design, is left out."""
    me, out = os.getpid(), set()
    for entry in Path("/proc").iterdir() if Path("/proc/self/stat").exists() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            cmd = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me and b"resource_tracker" not in cmd:
            out.add(int(entry.name))
    return out


@pytest.fixture(autouse=True)
def no_orphans():
    before_mp, before_os = set(multiprocessing.active_children()), os_children()
    yield
    left = [p for p in multiprocessing.active_children() if p not in before_mp]
    assert left == [], f"rank processes outlived the run: {left}"
    assert os_children() - before_os == set(), "child processes (or zombies) left behind"

"""An engine-neutral rank launcher: any rank program on N real `torch.distributed` rank processes.

`launch(program, payload, world_size, steps=...)` starts one process per rank (gloo on the CPU, ranks forked; NCCL
with one GPU per rank when there are enough, ranks spawned), runs ``program(rank, payload, comm).run()`` on each,
and returns every rank's list of per-step observations. A rank program is a class: `payload` is any picklable
object, `comm` is the launcher's `Collectives` (rank, world_size, device, backend, timeout_s, and `all_gather`,
which counts each collective on a progress board in shared memory), and the class attribute ``OPS`` names the
collectives of one step, in order, so that the parent can tell a rank that skipped or repeated one; an optional
``PRELOAD`` names modules a forkserver imports once for all ranks (an engine's, when ranks cannot fork from here).

Supervision: every collective has a timeout (the process group's), backed by a watchdog in the parent; a rank
that fails, dies, desyncs or stalls stops the run, and `RankFailure` names the rank at fault (module
`diagnosis`). No rank outlives `launch`: each dies with its parent (PR_SET_PDEATHSIG) and the parent terminates,
then kills, every rank on the way out. Only loopback is used: the rendezvous store listens on 127.0.0.1 (port
chosen by the OS) in the parent, and gloo is pinned to the loopback interface.

Modules: `board` (the progress board, `Collectives`), `child` (the rank process), `supervision` (the parent's
side of a run), `diagnosis` (`RankFailure` and the rules naming the rank at fault).
"""

from __future__ import annotations

import inspect
import math
import multiprocessing as mp
import os
import pickle
import tempfile
from dataclasses import dataclass, field
from typing import List, Optional

import torch

from contracts.launcher.board import Collectives
from contracts.launcher.child import RankPlan
from contracts.launcher.diagnosis import RankFailure
from contracts.launcher.supervision import Ranks, loopback_ifname

__all__ = ["DEFAULT_STARTUP_TIMEOUT_S", "DEFAULT_TIMEOUT_S", "BACKENDS", "Collectives", "LaunchResult", "RankFailure",
           "launch", "start_forkserver"]

DEFAULT_TIMEOUT_S = 30.0  # per collective; read at call time
DEFAULT_STARTUP_TIMEOUT_S = 60.0
BACKENDS = ("gloo", "nccl")


@dataclass
class LaunchResult:
    """A completed launch: every rank's observations, how its ranks ran, and the wall time from start to exit."""

    observations: List[list]  # [rank][step]
    backend: str
    start_method: str
    wall_s: float
    world_size: int = field(init=False)

    def __post_init__(self):
        self.world_size = len(self.observations)


def _program_ops(program) -> tuple:
    if not inspect.isclass(program) or not callable(getattr(program, "run", None)):
        raise TypeError(f"program: expected a rank program class with a run() method, got {program!r}")
    ops = getattr(program, "OPS", ())
    if not isinstance(ops, (tuple, list)) or not all(isinstance(o, str) and o for o in ops):
        raise TypeError(f"program.OPS: expected a tuple of collective names, got {ops!r}")
    if len(set(ops)) != len(ops):
        raise ValueError(f"program.OPS: collective names must be distinct, got {ops!r}")
    return tuple(ops)


def _count(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name}: must be >= 1, got {value}")
    return value


def _seconds(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected seconds (a number), got {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name}: must be a finite number > 0, got {value}")
    return float(value)


def _backend(backend: Optional[str], world_size: int) -> str:
    """The backend asked for, else NCCL when every rank can have a GPU of its own, else gloo on the CPU."""
    if backend is not None:
        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {BACKENDS} or None, got {backend!r}")
        return backend
    import torch.distributed as dist

    if torch.cuda.is_available() and dist.is_nccl_available() and torch.cuda.device_count() >= world_size:
        return "nccl"
    return "gloo"


def _start_method(start_method: Optional[str], backend: str) -> str:
    """Fork on the CPU (a spawned rank re-imports torch, seconds per rank); spawn for NCCL (CUDA does not fork). Where
    this process already holds a torch.distributed group (an engine's own, e.g. SGLang's scheduler), its gloo
    threads do not survive a fork and the forked rank could neither use nor tear down the group it inherits: the
    ranks fork from a fresh forkserver instead, which imports the program's PRELOAD modules once for every launch."""
    import torch.distributed as dist

    methods = mp.get_all_start_methods()
    if start_method is None:
        if backend != "gloo":
            return "spawn"
        if not (dist.is_available() and dist.is_initialized()) and "fork" in methods:
            return "fork"
        return "forkserver" if "forkserver" in methods else "spawn"
    if start_method not in methods:
        raise ValueError(f"start_method: expected one of {methods} or None, got {start_method!r}")
    return start_method


def start_forkserver(program) -> None:
    """Start the forkserver `launch` forks ranks from where this process holds a process group, with `program`'s
    PRELOAD importing there, and return at once: on a machine with a spare core that import (SGLang's takes about
    16 s) then runs beside this process's work instead of inside the first launch. A no-op when it runs already."""
    from multiprocessing import forkserver

    mp.get_context("forkserver").set_forkserver_preload(list(getattr(program, "PRELOAD", ())))
    forkserver.ensure_running()


def _picklable(payload) -> None:
    try:
        pickle.dumps(payload)
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        raise TypeError(f"payload: must be picklable (it travels to every rank), got {type(payload).__name__}: {e}") from e


def launch(program, payload, world_size: int, *, steps: int = 1, timeout_s: Optional[float] = None,
           startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S, backend: Optional[str] = None,
           start_method: Optional[str] = None, watchdog_s: Optional[float] = None) -> LaunchResult:
    """Run ``program(rank, payload, comm).run()`` on `world_size` rank processes; each returns `steps` observations.

    `timeout_s` bounds each collective (None: DEFAULT_TIMEOUT_S, read now); `startup_timeout_s` the forming of
    the process group; the parent's watchdog (`watchdog_s`, default: the collective timeout plus max(2 s, half of
    it)) catches a hang that no collective timeout reports. `backend` (gloo | nccl) and `start_method` (fork |
    spawn | forkserver) default as the module says. Raises `RankFailure` naming the rank at fault; bad arguments
    raise TypeError/ValueError naming the argument before any process starts.
    """
    ops = _program_ops(program)
    world_size, steps = _count("world_size", world_size), _count("steps", steps)
    timeout_s = _seconds("timeout_s", DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s)
    startup_timeout_s = _seconds("startup_timeout_s", startup_timeout_s)
    watchdog_s = timeout_s + max(2.0, 0.5 * timeout_s) if watchdog_s is None else _seconds("watchdog_s", watchdog_s)
    backend = _backend(backend, world_size)
    start_method = _start_method(start_method, backend)
    _picklable(payload)
    with tempfile.TemporaryDirectory(prefix="contracts-ranks-", ignore_cleanup_errors=True) as log_dir:
        plan = RankPlan(world_size, steps, ops, backend, timeout_s, startup_timeout_s, loopback_ifname(), log_dir,
                        tuple(sorted(os.environ.items())))
        with Ranks(plan, program, payload, start_method, watchdog_s) as ranks:
            ranks.start()
            reason = ranks.supervise()
            if reason is not None:
                raise ranks.failure(reason)
            return LaunchResult(ranks.finish(), backend, start_method, ranks.elapsed())

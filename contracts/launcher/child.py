"""The rank process: its entry point `rank_main`, what every rank is told (`RankPlan`), the program reference that
reaches spawned ranks, and the pact that kills a rank with its parent."""

from __future__ import annotations

import ctypes
import faulthandler
import os
import sys
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Optional, Tuple

import torch

from contracts.launcher.board import DONE, FAILED, IN_COLLECTIVE, JOINING, READY, RUNNING, SETUP, SLOTS, STATE, Collectives


@dataclass(frozen=True)
class RankPlan:
    """One launch as every rank sees it (validated and resolved by the parent)."""

    world_size: int
    steps: int
    ops: Tuple[str, ...]
    backend: str
    timeout_s: float
    startup_timeout_s: float
    loopback: Optional[str]  # the loopback interface gloo is pinned to; None: none found
    log_dir: str  # each rank's stderr goes to rank<r>.stderr here, quoted when the rank dies
    # The launching process's environment at this launch. A forkserver (or spawned) rank would otherwise run with the
    # environment the forkserver started with, which may be another launch's (an env-var setting of a test).
    environ: Tuple[Tuple[str, str], ...] = ()

    @property
    def release_wait_s(self) -> float:
        """How long a finished rank waits for its peers: long enough for every collective of the run to time out."""
        return self.startup_timeout_s + self.timeout_s * (len(self.ops) * self.steps + 1)


@dataclass(frozen=True)
class ProgramRef:
    """A rank program class as data: module, qualname and the directory its top package lives in.

    A spawned rank imports the module afresh. A module that is importable in the parent only because the
    caller's working directory is on sys.path (``python -m pytest``), or because pytest imported it by path
    (``--import-mode=importlib``), is found through ``root``.
    """

    module: str
    qualname: str
    root: Optional[str]

    @classmethod
    def of(cls, program) -> "ProgramRef":
        module = sys.modules.get(program.__module__)
        path = getattr(module, "__file__", None)
        root = None
        if path:
            root = os.path.dirname(os.path.abspath(path))
            for _ in range(program.__module__.count(".") + (os.path.basename(path) == "__init__.py")):
                root = os.path.dirname(root)
        return cls(program.__module__, program.__qualname__, root)

    def resolve(self):
        import importlib

        try:
            module = importlib.import_module(self.module)
        except ModuleNotFoundError:
            if self.root is None or self.root in sys.path:
                raise
            sys.path.insert(0, self.root)
            module = importlib.import_module(self.module)
        obj = module
        for part in self.qualname.split("."):
            obj = getattr(obj, part)
        return obj


def die_with_parent() -> None:
    """Linux: SIGKILL this rank if the parent dies, so a killed test run leaves no rank behind."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass


def _isolate(rank: int, plan: RankPlan) -> None:
    die_with_parent()
    faulthandler.disable()  # a forked rank inherits the parent's handler, which would dump the parent's stack
    log = os.open(os.path.join(plan.log_dir, f"rank{rank}.stderr"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 2)  # C++ aborts (gloo) write here; the parent quotes the tail if this rank dies
    os.close(log)
    torch.set_num_threads(1)
    if plan.environ and dict(os.environ) != dict(plan.environ):
        os.environ.clear()
        os.environ.update(plan.environ)
    if plan.backend == "gloo" and plan.loopback:
        os.environ["GLOO_SOCKET_IFNAME"] = plan.loopback  # loopback only


def _join_group(rank: int, plan: RankPlan, board, conn) -> tuple:
    """Rendezvous at the parent's store and form the process group; the rank's device and the store."""
    import torch.distributed as dist

    if not conn.poll(plan.startup_timeout_s):
        raise TimeoutError("no rendezvous address from the parent")
    host, port = conn.recv()
    board[rank * SLOTS + STATE] = JOINING
    store = dist.TCPStore(host, port, None, False, timeout=timedelta(seconds=plan.startup_timeout_s))
    device = torch.device("cpu")
    if plan.backend == "nccl":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    dist.init_process_group(plan.backend, store=store, rank=rank, world_size=plan.world_size,
                            timeout=timedelta(seconds=plan.timeout_s))
    return device, store


def _build_program(rank: int, plan: RankPlan, program: "ProgramRef", payload, comm, store):
    """Construct the rank program, then wait (bounded by the startup timeout) until every peer has built its own:
    building can be slow (a spawned rank imports its engine), and a peer waiting in its first collective would
    otherwise time out on the slowest builder."""
    comm.mark(SETUP)
    built = program.resolve()(rank, payload, comm)
    comm.mark(READY)
    store.set(f"built/{rank}", "1")
    # Twice the startup timeout: the parent's watchdog (startup_timeout_s from the launch) must be the one to call a
    # slow build, or a waiting peer's own timeout would race it and be reported instead. This is only a backstop.
    store.wait([f"built/{r}" for r in range(plan.world_size)], timedelta(seconds=2 * plan.startup_timeout_s))
    return built


def _check_observations(obs, steps: int) -> None:
    if not isinstance(obs, list) or len(obs) != steps:
        got = f"{len(obs)} observations" if isinstance(obs, list) else type(obs).__name__
        raise ValueError(f"run(): expected a list of one observation per step ({steps}), got {got}")


def _report_error(rank: int, board, conn, error: BaseException) -> None:
    """Send the error (and the state it came out of: a collective, the rendezvous...) to the parent, then exit
    without teardown."""
    state = board[rank * SLOTS + STATE]
    board[rank * SLOTS + STATE] = FAILED
    message = str(error).strip()
    try:
        conn.send(("error", {"type": type(error).__name__, "message": message.splitlines()[0] if message else "",
                             "state": state, "in_collective": state == IN_COLLECTIVE,
                             "traceback": traceback.format_exc(limit=6)}))
        conn.close()
    finally:
        os._exit(1)  # skip process-group teardown: peers may be gone


def rank_main(rank: int, plan: RankPlan, program: ProgramRef, payload, board, conn, release) -> None:
    """Entry point of a rank process. Reports ("ok", observations) or ("error", details) through `conn`."""
    try:
        _isolate(rank, plan)
        device, store = _join_group(rank, plan, board, conn)
        comm = Collectives(rank, plan.world_size, board, device, plan.ops, backend=plan.backend, timeout_s=plan.timeout_s)
        built = _build_program(rank, plan, program, payload, comm, store)
        comm.mark(RUNNING)
        obs = built.run()
        _check_observations(obs, plan.steps)
        comm.mark(DONE)
        conn.send(("ok", obs))
        # Stay connected until every peer is done: an early exit would turn a peer's timeout into a
        # "connection closed" error and blur who is at fault.
        release.wait(plan.release_wait_s)
        import torch.distributed as dist

        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 - everything goes back to the parent
        _report_error(rank, board, conn, e)

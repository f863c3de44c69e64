"""The parent's side of one launch (`Ranks`): start the rank processes, poll them, decide when the run has
failed, let the peers' errors arrive, stop every rank, and gather the reports."""

from __future__ import annotations

import multiprocessing as mp
import socket
import time
from datetime import timedelta
from multiprocessing import connection as mp_connection
from typing import Optional

from contracts.launcher import board as progress
from contracts.launcher.child import ProgramRef, RankPlan, rank_main
from contracts.launcher.diagnosis import STARTUP_REASON, WATCHDOG_REASON, Evidence, RankFailure, diagnose

POLL_S = 0.05  # the supervision loop's wait for a report or an exit


def loopback_ifname() -> Optional[str]:
    try:
        for _, name in socket.if_nameindex():
            if name.startswith("lo"):
                return name
    except OSError:
        pass
    return None


def terminate(procs) -> None:
    """Stop every process: SIGTERM, 5 s to go, then SIGKILL."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 5.0
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5.0)


class Ranks:
    """The rank processes of one launch and what they reported. Use as a context manager: leaving it stops every
    rank, whatever happened."""

    def __init__(self, plan: RankPlan, program, payload, start_method: str, watchdog_s: float):
        ctx = mp.get_context(start_method)
        if start_method == "forkserver":  # takes effect when the server starts, the first forkserver launch
            ctx.set_forkserver_preload(list(getattr(program, "PRELOAD", ())))
        self.plan, self.start_method, self.watchdog_s = plan, start_method, watchdog_s
        self.board = progress.new_board(ctx, plan.world_size)
        self.release = ctx.Event()
        pipes = [ctx.Pipe(duplex=True) for _ in range(plan.world_size)]
        self.conns, self._child_ends = [p[0] for p in pipes], [p[1] for p in pipes]
        ref = ProgramRef.of(program)
        self.procs = [ctx.Process(target=rank_main, args=(r, plan, ref, payload, self.board, pipes[r][1], self.release),
                                  name=f"rank-{r}", daemon=True) for r in range(plan.world_size)]
        self.open = {c: r for r, c in enumerate(self.conns)}  # pipes that may still bring a report
        self.results: dict = {}
        self.errors: dict = {}
        self.exitcodes: dict = {}
        self.store = None
        self.t0 = self.last_change = time.monotonic()
        self.last_sig = None

    def __enter__(self) -> "Ranks":
        return self

    def __exit__(self, *exc) -> None:
        terminate(self.procs)
        for c in self.conns + self._child_ends:
            c.close()
        self.store = None

    def start(self) -> None:
        import torch.distributed as dist

        for p in self.procs:
            p.start()
        for c in self._child_ends:
            c.close()
        # The store lives in the parent and is created after the fork, so no child inherits its server thread.
        self.store = dist.TCPStore("127.0.0.1", 0, None, True, timeout=timedelta(seconds=self.plan.startup_timeout_s),
                                   wait_for_workers=False)
        for c in self.conns:
            c.send(("127.0.0.1", self.store.port))

    def supervise(self) -> Optional[str]:
        """Poll until every rank has reported; None, or why the run failed."""
        while len(self.results) < self.plan.world_size:
            self.poll()
            reason = self.verdict()
            if reason is not None:
                return reason
        return None

    def poll(self) -> None:
        """One round: read the reports that arrived, note the ranks that exited without one."""
        waitables = list(self.open) + [p.sentinel for p in self.procs if p.exitcode is None]
        for obj in mp_connection.wait(waitables, timeout=POLL_S):
            if obj in self.open:
                self._receive(obj)
        self._note_exits(pending_reports=True)

    def _receive(self, conn) -> None:
        r = self.open.pop(conn)
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):
            return
        (self.results if kind == "ok" else self.errors)[r] = payload

    def _note_exits(self, pending_reports: bool) -> None:
        for r, p in enumerate(self.procs):
            if p.exitcode is None or r in self.results or r in self.errors:
                continue
            conn = self.conns[r]
            if pending_reports and conn in self.open and conn.poll(0):
                continue  # a clean report may still be in the pipe: read it before calling the rank dead
            self.exitcodes[r] = p.exitcode

    def rows(self) -> list:
        return [progress.read(self.board, r, self.plan.ops) for r in range(self.plan.world_size)]

    def verdict(self) -> Optional[str]:
        """The watchdog decision: why to stop now (a rank failed or exited, startup or progress ran out of time)."""
        if self.errors:
            return "a rank failed"
        if self.exitcodes:
            return "a rank exited"
        rows, now = self.rows(), time.monotonic()
        sig = tuple((x["state"], x["entered"], x["completed"]) for x in rows)
        if sig != self.last_sig:
            self.last_sig, self.last_change = sig, now
        started = all(x["state"] not in progress.STARTUP_STATES for x in rows)
        if not started and now - self.t0 > self.plan.startup_timeout_s:
            return f"{STARTUP_REASON} within {self.plan.startup_timeout_s:g}s"
        if started and now - self.last_change > self.watchdog_s:
            return f"{WATCHDOG_REASON}: no progress for {self.watchdog_s:g}s"
        return None

    def grace(self, reason: str) -> None:
        """Let the peers' own errors (timeouts, closed connections) arrive: they name the culprit. A silent stall
        will bring none, so it gets a short wait."""
        quiet = reason.startswith((WATCHDOG_REASON, STARTUP_REASON))
        end = time.monotonic() + (0.25 if quiet else min(1.0, 0.25 + 0.1 * self.plan.timeout_s))
        while time.monotonic() < end and self.open:
            for conn in mp_connection.wait(list(self.open), timeout=POLL_S):
                self._receive(conn)

    def failure(self, reason: str) -> RankFailure:
        """Stop the run and name the rank at fault."""
        self.grace(reason)
        self._note_exits(pending_reports=False)
        terminate(self.procs)
        plan = self.plan
        rows = dict(enumerate(self.rows()))
        return diagnose(Evidence(plan.ops, plan.steps, rows, self.results, self.errors, self.exitcodes, reason,
                                 plan.timeout_s, plan.log_dir))

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def finish(self) -> list:
        """Release the ranks (each waits for all to be done) and return their observations in rank order."""
        self.release.set()
        for p in self.procs:
            p.join(self.plan.timeout_s + 5.0)
        return [self.results[r] for r in range(self.plan.world_size)]

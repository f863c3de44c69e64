"""Which rank is at fault when a launch fails: `RankFailure`, the evidence the parent holds, and the rules that
name the rank, tried in order (the first that applies wins)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

from contracts.launcher.board import IN_COLLECTIVE, JOINING, READY, RUNNING, SETUP, STARTING, STATE_NAMES, position, where

STARTUP_REASON = "ranks did not start"  # how the parent's reasons begin, which the grace period and rules read
WATCHDOG_REASON = "watchdog"


class RankFailure(RuntimeError):
    """A launch that did not complete: `rank` is the rank at fault (None: none stands out), `kind` says how.

    kind: "desync" (a rank skipped or repeated a collective), "died" (exited without reporting), "error" (raised
    outside a collective), "timeout" (a collective or the watchdog ran out of time), "startup" (ranks never
    formed the process group). `step` and `op` place the rank's last collective; `ranks` holds one status line
    per rank, `tracebacks` the traceback each failing rank reported.
    """

    def __init__(self, rank: Optional[int], kind: str, message: str, *, step=None, op=None, ranks=None):
        self.rank, self.kind, self.step, self.op = rank, kind, step, op
        self.ranks = dict(ranks or {})  # rank -> one-line status
        self.tracebacks: dict = {}  # rank -> the traceback a failing rank reported
        super().__init__(message)


def stderr_tail(log_dir: str, rank: int, limit: int = 300) -> str:
    try:
        with open(os.path.join(log_dir, f"rank{rank}.stderr"), errors="replace") as f:
            lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(ln[:limit] for ln in lines[-2:])


@dataclass
class Evidence:
    """What the parent knows once it stops a failed launch."""

    ops: Tuple[str, ...]
    steps: int
    rows: Dict[int, dict]  # rank -> its progress-board row (board.read)
    results: dict  # rank -> observations, for ranks that finished
    errors: dict  # rank -> the error a rank reported
    exitcodes: dict  # rank -> exit code, for ranks that exited without reporting
    reason: str  # why the parent stopped the run
    timeout_s: float
    log_dir: str
    status: Dict[int, str] = field(init=False)

    def __post_init__(self):
        self.status = {r: self._status(r) for r in self.rows}

    @property
    def world(self) -> range:
        return range(len(self.rows))

    def where(self, rank: int) -> str:
        return where(self.rows[rank], self.ops)

    def _status(self, r: int) -> str:
        row, err = self.rows[r], self.errors.get(r)
        if r in self.results:
            return "finished"
        if err is not None:
            at = where({**row, "state": IN_COLLECTIVE if err["in_collective"] else RUNNING}, self.ops)
            return f"{err['type']} {at}: {err['message'][:200]}"
        if self.exitcodes.get(r) is not None:
            tail = stderr_tail(self.log_dir, r)
            return f"exited with code {self.exitcodes[r]} {self.where(r)} without reporting" + (f" (stderr: {tail})" if tail else "")
        return f"{STATE_NAMES[row['state']]}, {self.where(r)}"

    def _context(self) -> str:
        peers = "; ".join(f"rank {r}: {s}" for r, s in self.status.items())
        return f"[{self.reason}; timeout {self.timeout_s:g}s] — {peers}"

    def fail(self, rank: int, kind: str, what: str) -> RankFailure:
        row = self.rows[rank]
        return RankFailure(rank, kind, f"rank {rank} {what} {self._context()}", step=row["step"] if row["entered"] else None,
                           op=self.ops[row["op"]] if row["entered"] else None, ranks=self.status)

    def fail_all(self, kind: str, what: str) -> RankFailure:
        return RankFailure(None, kind, f"{what} {self._context()}", ranks=self.status)


def desync(ev: Evidence) -> Optional[RankFailure]:
    """A rank whose collective count does not match its place in the program skipped or repeated one."""
    for r in ev.world:
        row = ev.rows[r]
        expected = len(ev.ops) * ev.steps if r in ev.results else position(row)
        if row["entered"] != expected:
            return ev.fail(r, "desync", f"is out of step with the collective sequence: it entered {row['entered']} "
                                        f"collectives but its last one is step {row['step']} collective "
                                        f"'{ev.ops[row['op']]}', which is collective #{expected} of the program "
                                        f"(a skipped or extra collective)")
    return None


def died(ev: Evidence) -> Optional[RankFailure]:
    """A rank that died without saying why."""
    for r in ev.world:
        if r not in ev.errors and r not in ev.results and ev.exitcodes.get(r) not in (None, 0):
            return ev.fail(r, "died", f"died (exit code {ev.exitcodes[r]}) {ev.where(r)}")
    return None


def _timed_out(error: dict) -> bool:
    message = error["message"].lower()
    return "timed out" in message or "timeout" in message


def never_joined(ev: Evidence) -> Optional[RankFailure]:
    """A rank still starting (or still building its program), with no report of its own, while a peer waits for it
    at the rendezvous or the setup barrier (still waiting past the startup timeout, or failed there by a timeout)."""
    waits = (JOINING, READY)
    waiting = [r for r, e in ev.errors.items() if e.get("state") in waits and _timed_out(e)]
    if ev.reason.startswith(STARTUP_REASON):
        waiting += [r for r in ev.world if ev.rows[r]["state"] in waits]
    late = [r for r in ev.world if ev.rows[r]["state"] in (STARTING, SETUP) and r not in ev.errors]
    if not waiting or not late:
        return None
    what = "never joined the process group" if ev.rows[late[0]]["state"] == STARTING else "never finished building its rank program"
    return ev.fail(late[0], "startup", f"{what} (ranks {sorted(waiting)} wait for it)")


def raised(ev: Evidence) -> Optional[RankFailure]:
    """A rank that raised outside a collective."""
    for r in ev.world:
        e = ev.errors.get(r)
        if e is not None and not e["in_collective"]:
            return ev.fail(r, "error", f"raised {e['type']} {ev.where(r)}: {e['message'][:300]}")
    return None


def behind(ev: Evidence) -> Optional[RankFailure]:
    """A rank behind its peers never reached the collective they wait in."""
    live = [r for r in ev.world if r not in ev.results]
    ahead = max((ev.rows[r]["entered"] for r in ev.world), default=0)
    late = [r for r in live if ev.rows[r]["entered"] < ahead]
    if not late:
        return None
    r = min(late, key=lambda x: (ev.rows[x]["entered"], x))
    return ev.fail(r, "timeout", f"never reached the collective its peers wait in (it is {ev.where(r)})")


def stalled(ev: Evidence) -> Optional[RankFailure]:
    """Live ranks all at the same point: a timeout if time ran out, else an error none of them explains."""
    live = [r for r in ev.world if r not in ev.results]
    if not live:
        return None
    timed_out = ev.reason.startswith(WATCHDOG_REASON) or any(_timed_out(e) for e in ev.errors.values())
    kind = "timeout" if timed_out else "error"
    if len(live) == 1:
        return ev.fail(live[0], kind, f"did not complete {ev.where(live[0])}")
    return ev.fail_all(kind, f"ranks {live} all stalled at the same point, none behind another")


RULES = (desync, died, never_joined, raised, behind, stalled)


def diagnose(ev: Evidence) -> RankFailure:
    for rule in RULES:
        failure = rule(ev)
        if failure is not None:
            break
    else:
        failure = ev.fail_all("error", "rank run failed")
    if ev.reason.startswith(STARTUP_REASON) and failure.kind == "timeout":
        failure.kind = "startup"
    failure.tracebacks = {r: e["traceback"] for r, e in ev.errors.items()}
    return failure

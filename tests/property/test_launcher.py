"""`contracts.launcher`: any rank program on real rank processes, its supervision and fault diagnosis, argument
checks, and that no rank outlives a launch. The programs are tiny and neutral (no engine): each step every rank
all-gathers twice ("a" then "b"); a subclass misbehaves on FAULTY_RANK at FAULTY_STEP."""

from __future__ import annotations

import os
import time

import pytest
import torch

from contracts import launcher
from contracts.launcher import RankFailure, launch
from contracts.launcher import child as launcher_child
from tests.property.rank_processes import no_orphans  # noqa: F401 - autouse fixture

FAULTY_RANK, FAULTY_STEP = 1, 1


class Gather:
    """Each step: all-gather [rank, step], then [10 * rank, step]; reports what it received."""

    OPS = ("a", "b")

    def __init__(self, rank, payload, comm):
        self.rank, self.steps, self.comm = rank, payload, comm

    def gather(self, step, op):
        value = self.rank if op == "a" else 10 * self.rank
        return [t.tolist() for t in self.comm.all_gather(step, op, torch.tensor([value, step]))]

    def step(self, step):
        return {"a": self.gather(step, "a"), "b": self.gather(step, "b")}

    def run(self):
        return [{"rank": self.rank, "world": self.comm.world_size, **self.step(s)} for s in range(self.steps)]

    def faulty(self, step):
        return self.rank == FAULTY_RANK and step == FAULTY_STEP


class SkipsB(Gather):
    def step(self, step):
        if self.faulty(step):
            return {"a": self.gather(step, "a"), "b": None}
        return super().step(step)


class RepeatsA(Gather):
    def step(self, step):
        if self.faulty(step):
            self.gather(step, "a")
        return super().step(step)


class DiesBetween(Gather):
    def step(self, step):
        if self.faulty(step):
            self.gather(step, "a")
            os._exit(17)
        return super().step(step)


class RaisesBefore(Gather):
    def step(self, step):
        if self.faulty(step):
            raise ValueError("injected failure")
        return super().step(step)


class HangsBetween(Gather):
    def step(self, step):
        if self.faulty(step):
            self.gather(step, "a")
            time.sleep(3600)
        return super().step(step)


class SlowBuild(Gather):
    """Rank 1 takes `payload[1]` seconds to build (a spawned rank importing its engine)."""

    def __init__(self, rank, payload, comm):
        super().__init__(rank, payload[0], comm)
        if rank == FAULTY_RANK:
            time.sleep(payload[1])


class ShortReport(Gather):
    def run(self):
        out = super().run()
        return out[:-1] if self.rank == FAULTY_RANK else out


class NoCollectives:
    """A program that declares no OPS (it talks to its peers, if at all, through its own process groups)."""

    def __init__(self, rank, payload, comm):
        self.rank, self.payload, self.comm = rank, payload, comm

    def run(self):
        return [(self.rank, self.payload, self.comm.backend, self.comm.timeout_s)]


class UnknownOp(Gather):
    def run(self):
        self.comm.all_gather(0, "c", torch.zeros(1))


def test_every_rank_gathers_every_peer_in_order():
    result = launch(Gather, 3, 4, steps=3, timeout_s=20.0)
    assert (result.world_size, result.backend) == (4, "gloo")
    assert result.start_method == "fork" and result.wall_s > 0
    for r, steps in enumerate(result.observations):
        for s, o in enumerate(steps):
            assert (o["rank"], o["world"]) == (r, 4)
            assert o["a"] == [[p, s] for p in range(4)] and o["b"] == [[10 * p, s] for p in range(4)]


def test_payload_and_launch_settings_reach_the_program():
    result = launch(NoCollectives, {"x": (1, 2)}, 2, timeout_s=7.0)
    assert result.observations == [[(r, {"x": (1, 2)}, "gloo", 7.0)] for r in range(2)]


@pytest.mark.e2e
def test_a_skipped_collective_is_a_desync_naming_the_rank():
    t0 = time.monotonic()
    with pytest.raises(RankFailure, match="rank 1 is out of step") as caught:
        launch(SkipsB, 3, 2, steps=3, timeout_s=1.0)
    assert time.monotonic() - t0 < 1.0 + 6.0
    assert (caught.value.rank, caught.value.kind, caught.value.step, caught.value.op) == (1, "desync", 2, "b")


@pytest.mark.e2e
def test_an_extra_collective_is_a_desync_naming_the_rank():
    with pytest.raises(RankFailure, match="rank 1 is out of step") as caught:
        launch(RepeatsA, 3, 3, steps=3, timeout_s=1.0)
    assert (caught.value.rank, caught.value.kind) == (1, "desync")


def test_a_rank_that_dies_is_named_with_its_exit_code():
    t0 = time.monotonic()
    with pytest.raises(RankFailure, match=r"rank 1 died \(exit code 17\) after step 1 collective 'a'") as caught:
        launch(DiesBetween, 3, 4, steps=3, timeout_s=10.0)
    assert time.monotonic() - t0 < 10.0
    assert (caught.value.rank, caught.value.kind, caught.value.step, caught.value.op) == (1, "died", 1, "a")


def test_a_dead_rank_is_quoted_with_its_stderr_tail(monkeypatch):
    def dies_loudly(rank, plan, board, conn):  # a forked rank inherits the patch
        if rank == FAULTY_RANK:
            os.write(2, b"gloo: fatal loopback trouble\n")
            os._exit(6)
        return real_join(rank, plan, board, conn)

    real_join = launcher_child._join_group
    monkeypatch.setattr(launcher_child, "_join_group", dies_loudly)
    with pytest.raises(RankFailure, match=r"rank 1 died \(exit code 6\) before its first collective") as caught:
        launch(Gather, 1, 2, timeout_s=5.0, startup_timeout_s=10.0)
    assert "stderr: gloo: fatal loopback trouble" in caught.value.ranks[1]


def test_a_rank_that_raises_is_named_with_its_error_and_traceback():
    t0 = time.monotonic()
    with pytest.raises(RankFailure, match="rank 1 raised ValueError after step 0 collective 'b'.*injected failure") as caught:
        launch(RaisesBefore, 3, 3, steps=3, timeout_s=10.0)
    assert time.monotonic() - t0 < 10.0
    assert (caught.value.rank, caught.value.kind) == (1, "error")
    assert 'raise ValueError("injected failure")' in caught.value.tracebacks[1]


@pytest.mark.e2e
def test_a_stalled_rank_turns_into_a_timeout_naming_it():
    t0 = time.monotonic()
    with pytest.raises(RankFailure, match="rank 1 never reached") as caught:
        launch(HangsBetween, 3, 2, steps=3, timeout_s=1.0)  # healthy collectives take milliseconds
    elapsed = time.monotonic() - t0
    assert (caught.value.rank, caught.value.kind) == (1, "timeout")
    assert 1.0 <= elapsed < 1.0 + 6.0
    assert "timed out" in str(caught.value).lower()


@pytest.mark.e2e
def test_the_watchdog_catches_a_hang_no_collective_reports():
    t0 = time.monotonic()
    with pytest.raises(RankFailure, match=r"rank 1 never reached .*watchdog: no progress for 1s") as caught:
        launch(HangsBetween, 3, 2, steps=3, timeout_s=60.0, watchdog_s=1.0)  # the gloo timeout comes far too late
    assert time.monotonic() - t0 < 10.0
    assert (caught.value.rank, caught.value.kind) == (1, "timeout")


@pytest.mark.e2e
@pytest.mark.parametrize("timeout_s, startup_timeout_s, reason", [
    (5.0, 1.0, "ranks did not start within 1s"),  # the parent's startup timeout comes first
    (1.0, 8.0, "a rank failed"),  # rank 0's rendezvous times out first: it is the symptom, not the fault
])
def test_a_rank_that_never_joins_is_a_startup_failure(monkeypatch, timeout_s, startup_timeout_s, reason):
    def slow_join(rank, plan, board, conn):
        if rank == FAULTY_RANK:
            time.sleep(3600)
        return real_join(rank, plan, board, conn)

    real_join = launcher_child._join_group
    monkeypatch.setattr(launcher_child, "_join_group", slow_join)
    t0 = time.monotonic()
    with pytest.raises(RankFailure, match=rf"rank 1 never joined the process group .*\[{reason}") as caught:
        launch(Gather, 1, 2, timeout_s=timeout_s, startup_timeout_s=startup_timeout_s)
    assert time.monotonic() - t0 < min(timeout_s, startup_timeout_s) + 6.0
    assert (caught.value.rank, caught.value.kind) == (1, "startup")


@pytest.mark.e2e
def test_a_slow_build_is_startup_not_a_stalled_collective():
    # Rank 1 builds for 3x the collective timeout; rank 0, built at once, must not time out in its first collective.
    result = launch(SlowBuild, (2, 3.0), 2, steps=2, timeout_s=1.0, startup_timeout_s=20.0)
    assert [len(obs) for obs in result.observations] == [2, 2]


@pytest.mark.e2e
def test_a_build_that_never_ends_is_a_startup_failure_naming_the_rank():
    t0 = time.monotonic()
    with pytest.raises(RankFailure, match=r"rank 1 never finished building its rank program \(ranks \[0\] wait for it\)"
                       r".*ranks did not start within 2s") as caught:
        launch(SlowBuild, (1, 3600.0), 2, timeout_s=1.0, startup_timeout_s=2.0)
    assert time.monotonic() - t0 < 2.0 + 6.0
    assert (caught.value.rank, caught.value.kind) == (1, "startup")


def test_a_short_report_is_an_error_naming_the_rank():
    with pytest.raises(RankFailure, match=r"rank 1 raised ValueError .*one observation per step \(2\), got 1") as caught:
        launch(ShortReport, 2, 2, steps=2, timeout_s=5.0)
    assert (caught.value.rank, caught.value.kind) == (1, "error")


def test_an_undeclared_collective_is_refused_in_the_rank():
    with pytest.raises(RankFailure, match=r"rank \d raised ValueError .*op: 'c' is not one of the program's OPS"):
        launch(UnknownOp, 1, 2, timeout_s=5.0)


@pytest.mark.e2e
def test_a_program_defined_in_a_test_module_reaches_spawned_ranks():
    """Under spawn the rank imports this module afresh, found through the program reference's root (pytest imports
    it by path). One rank: a spawned rank imports torch afresh, which costs seconds on this machine."""
    result = launch(Gather, 2, 1, steps=2, timeout_s=30.0, start_method="spawn")
    assert result.start_method == "spawn"
    assert [o["b"] for o in result.observations[0]] == [[[0, 0]], [[0, 1]]]


class _NotAProgram:
    pass


class _BadOps(Gather):
    OPS = "ab"


class _RepeatedOps(Gather):
    OPS = ("a", "a")


@pytest.mark.parametrize("args, kwargs, error, field", [
    ((Gather(0, 1, None), 1, 2), {}, TypeError, "program"),
    ((_NotAProgram, 1, 2), {}, TypeError, "program"),
    ((_BadOps, 1, 2), {}, TypeError, r"program\.OPS"),
    ((_RepeatedOps, 1, 2), {}, ValueError, r"program\.OPS"),
    ((Gather, 1, 0), {}, ValueError, "world_size"),
    ((Gather, 1, True), {}, TypeError, "world_size"),
    ((Gather, 1, 2), {"steps": 0}, ValueError, "steps"),
    ((Gather, 1, 2), {"steps": 1.0}, TypeError, "steps"),
    ((Gather, 1, 2), {"timeout_s": 0}, ValueError, "timeout_s"),
    ((Gather, 1, 2), {"timeout_s": float("inf")}, ValueError, "timeout_s"),
    ((Gather, 1, 2), {"timeout_s": "5"}, TypeError, "timeout_s"),
    ((Gather, 1, 2), {"startup_timeout_s": -1.0}, ValueError, "startup_timeout_s"),
    ((Gather, 1, 2), {"watchdog_s": 0.0}, ValueError, "watchdog_s"),
    ((Gather, 1, 2), {"backend": "mpi"}, ValueError, "backend"),
    ((Gather, 1, 2), {"start_method": "teleport"}, ValueError, "start_method"),
    ((Gather, lambda: None, 2), {}, TypeError, "payload"),
])
def test_bad_arguments_name_the_field_before_anything_starts(args, kwargs, error, field, monkeypatch):
    monkeypatch.setattr(launcher, "Ranks", None)  # a launch that got as far as starting ranks would fail otherwise
    with pytest.raises(error, match=f"^{field}:"):
        launch(*args, **kwargs)


def test_the_default_timeout_is_read_at_call_time(monkeypatch):
    monkeypatch.setattr(launcher, "DEFAULT_TIMEOUT_S", 3.5)
    assert launch(NoCollectives, None, 1).observations == [[(0, None, "gloo", 3.5)]]


@pytest.mark.e2e
def test_ranks_come_from_a_forkserver_where_this_process_holds_a_process_group(tmp_path):
    """An engine may hold its own torch.distributed group in this process (SGLang's scheduler does, at the step
    level). A forked rank inherits its gloo threads broken and cannot form another group (a segfault or 'initialize
    the default process group twice'), so the launcher forks them from a forkserver then; one started ahead
    (`start_forkserver`, so its imports overlap other work) is the one they come from. In a fresh interpreter, so
    this test's process keeps no group."""
    import subprocess
    import sys

    code = (
        "import torch.distributed as dist\n"
        "from multiprocessing import forkserver\n"
        "from contracts.launcher import launch, start_forkserver\n"
        "from tests.property.test_launcher import Gather\n"
        f"dist.init_process_group('gloo', init_method='file://{tmp_path}/group', rank=0, world_size=1)\n"
        "start_forkserver(Gather)\n"
        "ahead = forkserver._forkserver._forkserver_pid\n"
        "result = launch(Gather, 2, 1, steps=2, timeout_s=30.0)\n"
        "print(result.start_method, result.observations[0][0]['b'], ahead == forkserver._forkserver._forkserver_pid)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[0] == "forkserver" and run.stdout.split()[-1] == "True", run.stdout

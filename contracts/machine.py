"""The stateful decode-loop contract machine.

A Hypothesis `RuleBasedStateMachine` that drives any adapter declaring the
`step` capability: rules add requests (local prefill or PD handoff), step,
abort a request and toggle overlap scheduling; after every rule the checked
invariant families hold. A failure is shrunk and reported with its replayable
step program (`state = DecodeLoop()`, the drawn engine spec and requests,
`state.start(...)`, `state.add_requests(...)`, `state.step(n=2)`, ...) in the
violation's observed value, plus Hypothesis' `@reproduce_failure` line. Before
the search, a run replays one pinned program (more live requests than the
largest graph batch, overlap on, ragged verify), so that edge is met every run.

Families (a contract picks the ones it states):
  greedy       greedy rows emit exactly the target's plain greedy decoding, token for token
  bookkeeping  new_seq_len = seq_len + commit_len; the target cache holds the committed
               sequence without the pending anchor; draft context length == seq_len; every
               emitted token reaches the output exactly once, across the PD handoff and the relay
  planner      1 <= L <= gamma+1, commit_len = correct_len + 1 <= L, sum(L - max(min,1)) <= budget
               <= planned*gamma, forced fraction; static steps and steps without a budget verify all (a
               static step of a step.self-truncating engine verifies its drafter's own cut)
  progress     every step emits >= 1 token per live request; a request ends within max_new_tokens

Families only gate checks, never draws, so every family sees the same programs. Inside `shared_runs` (the contract
suite), LOOP-001..004 share one run that checks all four (all but those the engine's ledger lists: they run alone);
a failure there reruns each contract's own families, so what fails is shrunk and reported as before.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace

import torch
from hypothesis import HealthCheck, Phase, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from contracts import budget
from contracts.boundary.engine import RequestSpec
from contracts.checks import expect, expect_equal
from contracts.protocol import STEP_OVERLAP_TOGGLE, STEP_PD, STEP_PD_DECODE, STEP_RAGGED, STEP_SELF_TRUNCATING
from contracts.strategies.engine import MACHINE_SPECS, request_shapes
from contracts.violation import Mismatch

FAMILIES = ("greedy", "bookkeeping", "planner", "progress")
DEFAULT_SPECS = st.sampled_from(MACHINE_SPECS)  # one choice per example keeps shrinking cheap
MAX_LIVE = 10  # beyond the largest captured graph batch (8), so padding and row reuse both happen


@contextmanager
def single_thread():
    """Small tensors run faster (and steadier) on one intra-op thread; restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def drain(engine, handle, max_steps: int = 200) -> None:
    """Step until no request is live; a generation that outlives `max_steps` (whole generations never need 200:
    max_new_tokens <= 10 per request) is the engine's failure, named with the requests still running."""
    live = {v.rid for v in engine.request_views(handle) if v.live}
    for _ in range(max_steps):
        if not live:
            return
        live -= set(engine.step(handle).finished)
    expect(False, "generation", f"done within {max_steps} steps", f"requests {sorted(live)} still running")


def serve(engine, case, on_step=None, max_steps: int = 200):
    """Serve a LoopCase in a fresh engine: the first request joins after one step of the others (a join mid-run),
    then step until none is live, calling `on_step(handle, step, view)` after each step; returns the handle."""
    handle = engine.new_engine(case.spec)
    first, rest = case.requests[:1], case.requests[1:]
    engine.add_requests(handle, list(rest or first), join_via(engine, "pd"))
    pending = list(first) if rest else []
    for step in range(max_steps):
        if not any(v.live for v in engine.request_views(handle)):
            if not pending:
                return handle
        else:
            view = engine.step(handle)
            if on_step is not None:
                on_step(handle, step, view)
        if pending:
            engine.add_requests(handle, pending, join_via(engine, "local"))
            pending = []
    live = sorted(v.rid for v in engine.request_views(handle) if v.live)
    expect(False, "generation", f"done within {max_steps} steps", f"requests {live} still running")


def greedy_reference(engine, handle, req) -> list:
    """Plain greedy decoding of the engine's own target, one target call per token."""
    seq, out = list(req.prompt), []
    while len(out) < req.max_new_tokens:
        tok = int(torch.argmax(engine.target_next_logits(handle, seq)))
        out.append(tok)
        seq.append(tok)
        if req.eos_id is not None and tok == req.eos_id:
            break
    return out


class DecodeLoopMachine(RuleBasedStateMachine):
    engine = None  # the adapter under test, set by `machine_for`
    families = frozenset(FAMILIES)
    specs = None  # strategy of EngineSpec

    def __init__(self):
        super().__init__()
        self.h, self.spec, self.overlap = None, None, False
        self.next_rid = 0
        self.reqs = {}  # rid -> RequestSpec
        self.refs = {}  # rid -> greedy reference
        self.decoded = {}  # rid -> decode steps taken
        self.live = []  # rids in the running batch, per the engine's own views and step reports

    # ---- rules -------------------------------------------------------------------

    @initialize(data=st.data(), via=st.sampled_from(["local", "pd"]), n=st.integers(1, 3))
    def start(self, data, via, n):
        """A fresh engine with a first batch of requests (so every program starts with live work)."""
        self._new_engine(data.draw(self.specs if self.specs is not None else DEFAULT_SPECS, label="spec"))
        self._admit(data, via, n)

    def _via(self, via: str) -> str:
        """Mapped by join_via, not drawn from another list, so the programs an engine with every capability sees
        stay the same."""
        return join_via(self.engine, via)

    def _new_engine(self, spec):
        self.spec = spec
        self.h = self.engine.new_engine(spec)
        self.overlap = spec.enable_overlap
        self.overlap_steps = 0  # steps since overlap was last switched on (the relay's history)

    def _views(self) -> dict:
        return {v.rid: v for v in self.engine.request_views(self.h)}

    @precondition(lambda self: self.h is not None and len(self.live) < MAX_LIVE)
    @rule(data=st.data(), via=st.sampled_from(["local", "pd"]))
    def add_requests(self, data, via):
        self._admit(data, via, data.draw(st.integers(1, min(4, MAX_LIVE - len(self.live))), label="new requests"))

    def _admit(self, data, via, n):
        via = self._via(via)
        shapes = request_shapes(self.spec.vocab_size)
        # A batch of one shape unless drawn distinct: failures that need many requests (rows past a ring size) then
        # shrink to one shape per batch instead of one per request, at no loss of reach.
        if n > 1 and not data.draw(st.booleans(), label="distinct shapes"):
            shape = data.draw(shapes, label=f"requests {self.next_rid}..{self.next_rid + n - 1}")
            reqs = [RequestSpec(self.next_rid + i, *shape) for i in range(n)]
        else:
            reqs = [RequestSpec(self.next_rid + i, *data.draw(shapes, label=f"request {self.next_rid + i}"))
                    for i in range(n)]
        self._admit_requests(reqs, via)

    def _admit_requests(self, reqs, via):
        self.next_rid += len(reqs)
        self.engine.add_requests(self.h, reqs, via)
        views = self._views()
        self.live = sorted(rid for rid, v in views.items() if v.live)
        for r in reqs:
            self.reqs[r.rid], self.decoded[r.rid] = r, 0
            v = views[r.rid]
            if "bookkeeping" in self.families:  # nothing lost or duplicated across the handoff / prefill
                expect_equal(f"request {r.rid} output after {via} admission", 1, len(v.output))
                if v.live:
                    expect_equal(f"request {r.rid} seq_len after {via} admission", len(r.prompt), v.seq_len)
                    expect_equal(f"request {r.rid} pending anchor after {via} admission", v.output[0], v.bonus)

    @precondition(lambda self: self.h is not None and bool(self.live))
    @rule(n=st.integers(1, 3))
    def step(self, n):
        """Up to n decode steps in a row (fewer when the batch empties)."""
        for _ in range(n):
            if self.live:
                self._one_step()

    def _one_step(self):
        before = {rid: v for rid, v in self._views().items() if v.live}
        view = self.engine.step(self.h)
        after = self._views()
        if "bookkeeping" in self.families:
            self._check_bookkeeping(before, view, after)
        if "planner" in self.families:
            self._check_planner(view)
        for rid in view.rids:
            self.decoded[rid] += 1
        self.overlap_steps += self.overlap
        self.live = sorted(rid for rid, v in after.items() if v.live)
        if "progress" in self.families:
            self._check_progress(view, after)

    @precondition(lambda self: self.h is not None and bool(self.live))
    @rule(data=st.data())
    def abort(self, data):
        rid = self.live[data.draw(st.integers(0, len(self.live) - 1), label="live index")]
        self.engine.abort(self.h, rid)
        self.live.remove(rid)

    @precondition(lambda self: self.h is not None and STEP_OVERLAP_TOGGLE in self.engine.capabilities)
    @rule()
    def toggle_overlap(self):
        self.overlap = not self.overlap
        self.overlap_steps = 0
        self.engine.set_overlap(self.h, self.overlap)

    # ---- per-step checks --------------------------------------------------------------

    def _check_bookkeeping(self, before, view, after):
        expect_equal("step rids (each live request exactly once)", sorted(before), sorted(view.rids))
        for i, rid in enumerate(view.rids):
            b, a = before[rid], after[rid]
            expect_equal(f"request {rid} seq_len the step resolved", b.seq_len, view.seq_lens[i])
            expect_equal(f"request {rid} new_seq_len", view.seq_lens[i] + view.commit_lens[i], view.new_seq_lens[i])
            n = len(view.emitted[i])
            if rid in view.finished:
                expect(1 <= n <= view.commit_lens[i], f"request {rid} emitted at finish", f"1..{view.commit_lens[i]}", n)
            else:
                expect_equal(f"request {rid} tokens emitted (= commit_len)", view.commit_lens[i], n)
                expect_equal(f"request {rid} next seq_len", view.new_seq_lens[i], a.seq_len)
            expect_equal(f"request {rid} output", b.output + list(view.emitted[i]), a.output)

    def _check_planner(self, view):
        g = self.spec.gamma
        floor = max(self.spec.min_verify_len, 1)
        planned_rows = []
        if self.spec.verify_mode != "static" and view.budget is None:
            lag = self.engine.overlap_budget_lag(self.h)
            expect(self.overlap and self.overlap_steps < lag, "step budget",
                   f"a budget (none only in the first {lag} steps with overlap on)",
                   f"none, overlap {'on for ' + str(self.overlap_steps) + ' steps' if self.overlap else 'off'}")
        for i, rid in enumerate(view.rids):
            L, n, c, trim = view.verify_lens[i], view.correct_lens[i], view.commit_lens[i], view.cap_trim[i]
            expect(1 <= L <= g + 1, f"request {rid} verify_len", f"in [1, {g + 1}]", L)
            expect(0 <= n <= L - 1, f"request {rid} correct_len", f"in [0, L-1={L - 1}]", n)
            expect_equal(f"request {rid} commit_len", n + 1, c)
            expect(trim >= 0 and n + trim <= g, f"request {rid} cap_trim", f"in [0, gamma - correct_len = {g - n}]", trim)
            if self.spec.verify_mode == "static":
                if STEP_SELF_TRUNCATING not in self.engine.capabilities:  # else the drafter's own cut, in [1, g+1]
                    expect_equal(f"request {rid} verify_len (static)", g + 1, L)
                expect_equal(f"request {rid} cap_trim (static)", 0, trim)
            elif view.budget is None:  # nothing resolved yet: no plan, every row verifies all
                expect(not view.planned[i] and L == g + 1, f"request {rid} without a budget", f"verify all ({g + 1})",
                       f"L={L}, planned={view.planned[i]}")
            else:
                expect(view.planned[i], f"request {rid} planned (the step has a budget)", True, view.planned[i])
                expect(L >= floor, f"request {rid} verify_len", f">= {floor}", L)
                planned_rows.append(i)
        if planned_rows:
            spent = sum(view.verify_lens[i] - floor for i in planned_rows)
            budget = view.budget
            # The rows the budget was planned over: the view's, or more where the engine's batch held rows the view
            # leaves out (an aborted request riding one more forward).
            rows = len(planned_rows) if view.budget_rows is None else view.budget_rows
            expect(rows >= len(planned_rows), "budget rows", f">= the {len(planned_rows)} planned rows shown", rows)
            expect(budget is not None and spent <= budget <= rows * g, "budget",
                   f"sum(L - {floor}) = {spent} <= budget <= {rows * g}", budget)
            if self.spec.force_budget_frac is not None:
                expect_equal("budget (forced fraction)", math.floor(self.spec.force_budget_frac * rows * g), budget)

    def _check_progress(self, view, after):
        for i, rid in enumerate(view.rids):
            expect(len(view.emitted[i]) >= 1, f"request {rid} tokens emitted this step", ">= 1", view.emitted[i])
            if after[rid].live:
                limit = self.reqs[rid].max_new_tokens - 1  # the prefill emitted one token, each step at least one more
                expect(self.decoded[rid] < limit, f"request {rid} decode steps while live", f"< max_new_tokens - 1 = {limit}",
                       self.decoded[rid])

    # ---- invariants after every rule ------------------------------------------------

    @invariant()
    def requests_agree(self):
        if self.h is None:
            return
        for rid, v in self._views().items():
            r = self.reqs[rid]
            if "greedy" in self.families and r.greedy:
                if rid not in self.refs:
                    self.refs[rid] = greedy_reference(self.engine, self.h, r)
                ref = self.refs[rid]
                expect_equal(f"greedy request {rid} output (plain greedy decoding: {ref})", ref[: len(v.output)], v.output)
                if not v.live and v.finish_reason != "abort":
                    expect_equal(f"greedy request {rid} finished output", ref, v.output)
            if "bookkeeping" in self.families:
                self._check_request(r, v)

    def _check_request(self, r, v):
        expect(1 <= len(v.output) <= r.max_new_tokens, f"request {r.rid} output length", f"1..{r.max_new_tokens}", len(v.output))
        if r.eos_id is not None and r.eos_id in v.output[:-1]:
            expect(False, f"request {r.rid} output", "nothing after EOS", v.output)
        if v.live:
            full = list(r.prompt) + v.output
            expect_equal(f"request {r.rid} seq_len (prompt + output - pending anchor)", len(full) - 1, v.seq_len)
            expect_equal(f"request {r.rid} target cache (committed, anchor excluded)", full[:-1], v.cache_tokens)
            expect_equal(f"request {r.rid} pending anchor", full[-1], v.bonus)
            expect_equal(f"request {r.rid} draft context length", v.seq_len, v.draft_ctx_len)
        elif v.finish_reason != "abort":
            done = len(v.output) == r.max_new_tokens or (r.eos_id is not None and v.output[-1] == r.eos_id)
            expect(done, f"request {r.rid} finished ({v.finish_reason})", "at max_new_tokens or EOS", v.output)


def machine_for(engine, families=FAMILIES, specs=None):
    """A DecodeLoop machine class bound to one adapter and the checked families."""
    return type("DecodeLoop", (DecodeLoopMachine,), {"engine": engine, "families": frozenset(families), "specs": specs})


_SEEDED: list = []  # (seed, runs) while `seeded` is active


@contextmanager
def seeded(seed: int):
    """Run the decode-loop machine from a random `seed` instead of the derandomized profile's fixed one (nightly
    depth for the machine contracts, which take no cases and so no --hypothesis-seed); yields the list of seeds the
    machine actually ran with, empty when the contract run did not use the machine."""
    runs: list = []
    _SEEDED.append((seed, runs))
    try:
        yield runs
    finally:
        _SEEDED.pop()


# A program every run of the default specs starts with, before the search: an edge a drawn program reaches only by
# luck. More live requests than the largest captured graph batch (8), overlap on, ragged verify: the relay, the graph
# padding and the pool all see rows past it; greedy and sampled rows, decoded to completion.
PAST_THE_RING = next(s for s in MACHINE_SPECS if s.enable_overlap and s.verify_mode == "compact" and s.capture_bs)


def _past_the_ring_requests(vocab_size: int) -> list:
    return [RequestSpec(i, tuple(t % vocab_size for t in range(i, i + 1 + i % 2)), (0.0, 1.0)[i % 2], 8 + i % 4)
            for i in range(MAX_LIVE - 1)]


def join_via(engine, want: str) -> str:
    """How a request a contract wants to join by `want` ("local" or "pd") joins this engine: a PD decode server
    (step.pd-decode) takes every request by handoff, an engine without step.pd-handoff prefills every one itself."""
    if STEP_PD_DECODE in engine.capabilities:
        return "pd"
    return want if want == "local" or STEP_PD in engine.capabilities else "local"


def engine_specs(engine) -> list:
    """The machine's engine configurations this engine runs: the static ones only without step.ragged."""
    return [s for s in MACHINE_SPECS if s.verify_mode == "static" or STEP_RAGGED in engine.capabilities]


def run_pinned_program(machine) -> None:
    """The machine's checks over the pinned program (a Mismatch names the program); in static mode on an engine
    without the ragged verify modes, which still puts more live requests than a captured batch through overlap."""
    spec = PAST_THE_RING
    if STEP_RAGGED not in machine.engine.capabilities:
        spec = replace(spec, verify_mode="static", force_budget_frac=None, sps=None, capture_bs=None)
    state, reqs = machine(), _past_the_ring_requests(spec.vocab_size)
    try:
        state._new_engine(spec)
        state._admit_requests(reqs, join_via(state.engine, "local"))
        state.requests_agree()
        while state.live:
            state._one_step()
            state.requests_agree()
    except Exception as e:
        _reraise_with(e, f"    pinned program: {spec}, requests {reqs} added locally, steps until none is live",
                      "pinned program")


def _reraise_with(e: Exception, program: str, where: str):
    """The failure as a Mismatch that names the program; an engine exception as the machine's catch-all."""
    if isinstance(e, Mismatch):
        raise Mismatch(e.what, e.expected, f"{e.observed}\n{program}") from None
    raise Mismatch(f"engine call in the {where}", "no exception", f"{type(e).__name__}: {e}\n{program}") from e


_SHARED: ContextVar[dict | None] = ContextVar("shared_machine_runs", default=None)


@contextmanager
def shared_runs(memo: dict | None):
    """Within the block, a machine run of some families is done when one run of them all passed (`memo` records
    those runs: the contract suite keeps one for its session). None turns sharing off: for a run with the ledger's
    corrections applied, whose engine code is not the code `memo` saw."""
    token = _SHARED.set(memo)
    try:
        yield
    finally:
        _SHARED.reset(token)


# The contract each family gates (catalog/decode_loop.py): a family whose contract the engine's ledger lists fails the
# shared run every time, so it runs on its own and the others still share one run.
FAMILY_CONTRACTS = {"greedy": "LOOP-001", "bookkeeping": "LOOP-002", "planner": "LOOP-003", "progress": "LOOP-004"}


def unlisted_families(engine) -> tuple:
    """The families whose contract the engine's ledger does not list: those the shared run checks."""
    from contracts import ledger

    return tuple(f for f in FAMILIES if not ledger.engine_entries(engine, FAMILY_CONTRACTS[f]))


def _all_families_pass(memo: dict, engine, max_examples: int, steps: int) -> bool:
    base = budget.base_settings()
    key = (id(engine), max_examples, steps, budget.scaled(min(max_examples, base.max_examples)), repr(base))
    if key not in memo:
        try:
            _run_decode_loop(engine, unlisted_families(engine), None, max_examples, steps)
            memo[key] = True
        except Exception:  # the contracts rerun their own families: what fails is shrunk for its own check
            memo[key] = False
    return memo[key]


def run_decode_loop(engine, families=FAMILIES, *, specs=None, max_examples=25, steps=12) -> None:
    """Run the machine as a test; raises the first violated expectation (a Mismatch) after shrinking."""
    memo = _SHARED.get()
    if memo is not None and specs is None and not _SEEDED and set(families) <= set(unlisted_families(engine)):
        if _all_families_pass(memo, engine, max_examples, steps):
            return
    _run_decode_loop(engine, families, specs, max_examples, steps)


def _run_decode_loop(engine, families, specs, max_examples, steps) -> None:
    if specs is None and len(engine_specs(engine)) < len(MACHINE_SPECS):
        specs = st.sampled_from(engine_specs(engine))
        with single_thread():
            run_pinned_program(machine_for(engine, families, specs))
    machine = machine_for(engine, families, specs)
    if specs is None:
        with single_thread():
            run_pinned_program(machine)
    base = budget.base_settings()  # the run's profile: `ci` for a negative control, whatever this process loaded
    limit = budget.scaled(min(max_examples, base.max_examples))  # the engine's share, if it declares one
    # No explain phase: its coverage-traced replays cost more than the shrinking, and the step program says enough.
    phases = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)
    seed = _SEEDED[-1][0] if _SEEDED else None
    config = settings(base, max_examples=limit, stateful_step_count=steps, deadline=None, report_multiple_bugs=False, database=None,
                      phases=phases, **({} if seed is None else {"derandomize": False}),
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
    if seed is not None:
        _SEEDED[-1][1].append(seed)
        machine = hypothesis_seed(seed)(machine)  # `@seed` on a RuleBasedStateMachine class seeds its runs
    try:
        with single_thread():
            run_state_machine_as_test(machine, settings=config)
    except Exception as e:
        _reraise_with(e, step_program(e), "step program")


def step_program(error: Exception) -> str:
    """The shrunk, replayable step program Hypothesis attached to `error` (its notes), without the explanation."""
    lines = []
    for note in getattr(error, "__notes__", []):
        if note.startswith("Explanation:") or note.startswith("    These lines") or note.startswith("        "):
            continue
        lines.append(note.strip("\n"))
    return "\n".join("    " + line for text in lines for line in text.splitlines())

"""Idle DP ranks through whole steps, in every verify mode and step kind the engine's ranks run.

The DP-metadata and ranks contracts hold an idle rank to the draft side of a decode step; these follow it through
a local prefill, a decode step's verify in the engine's verify mode (static, cap-accept, compact), the first decode
after a PD handoff, and a step no rank has work in, on real rank processes. The expected values come from the case
alone: request counts, prompt lengths, Q = the draft width, T = gamma + 1, the captured sizes; the verify lengths a
planner picks are the engine's, held to their range and to the layout they imply.
"""

from __future__ import annotations

from hypothesis import reject

from contracts import oracle
from contracts.boundary.ranks import VERIFY_KINDS, RankStepsCase
from contracts.checks import expect, expect_equal
from contracts.protocol import RANKS_STEPS
from contracts.registry import contract
from contracts.strategies.rank_steps import engine_cases
from contracts.violation import Mismatch

BUDGET = 4  # each case is one multi-process run (about 0.3 s on a free core)
# The smallest case where an idle rank meets a captured verify graph: drawn cases meet graphs that cover every rank
# in about 4 of 10, so at the check's budget a seed could miss it.
GRAPH_CASE = RankStepsCase(world_size=2, verify_modes=("compact",), gamma=1, kinds=("decode",), batch_sizes=((0, 1),),
                           prompt_lens=(((), ()),), capture_bs=(1,), budget_frac=None, sample_from_anchor=False)


def _run(engine, case):
    # A pinned case runs only where the engine's ranks run its modes and kinds (the drawn ones always do).
    if not (set(case.verify_modes) <= set(engine.rank_verify_modes) and set(case.kinds) <= set(engine.rank_step_kinds)):
        reject()
    run = engine.run_rank_steps(case)
    if run.failure is not None:
        f = run.failure
        raise Mismatch(f"rank {f.rank} run", f"all {case.world_size} ranks, idle ones included, complete every step's "
                       f"collectives within {run.timeout_s:g}s", f"rank {f.rank} failed ({f.kind}): {f.message}")
    expect_equal("ranks reporting", case.world_size, len(run.ranks))
    for r, steps in enumerate(run.ranks):
        expect_equal(f"rank {r} steps reported (every step in each verify mode)", len(case.schedule), len(steps))
    return run


def _steps(engine, case):
    """(verify mode, step, kind, [observation per rank]) for every step the ranks ran."""
    run = _run(engine, case)
    for i, (mode, s) in enumerate(case.schedule):
        obs = [run.ranks[r][i] for r in range(case.world_size)]
        for r, o in enumerate(obs):
            expect_equal(f"{mode}: run step {i} rank {r}: (verify mode, step) reported", (mode, s), (o.verify_mode, o.step))
        yield mode, s, case.kinds[s], obs


def _at(mode, s, kind, r, bs, field):
    return f"{mode}: step {s} ({kind}) rank {r}{' (idle)' if bs == 0 else ''}: {field}"


def _forward_tokens(case, s):
    """Each rank's rows in the step's first forward: its prompt tokens at a prefill, its requests x Q otherwise."""
    if case.kinds[s] == "prefill":
        return tuple(sum(lens) for lens in case.prompt_lens[s])
    return tuple(n * case.draft_width for n in case.batch_sizes[s])


def _verify_tokens(case, mode, lens, bs):
    """A rank's real verify rows: sum(L) packed in compact mode, every request's T strided cells otherwise."""
    return sum(lens) if mode == "compact" else bs * (case.gamma + 1)


@contract("RANKS-008", "in every verify mode and step kind (prefill, decode, PD handoff, no work anywhere), every DP rank, "
          "idle ones included, completes the step, enters as many collectives as its peers and holds the same "
          "per-rank request counts and forward token counts in rank order: prompt tokens at a prefill, requests x Q "
          "otherwise, 0 for an idle rank, whose forward is IDLE", requires={RANKS_STEPS}, cases=engine_cases,
          max_examples=BUDGET)
def idle_rank_counts_in_every_mode(engine, case):
    for mode, s, kind, obs in _steps(engine, case):
        row, tokens = case.batch_sizes[s], _forward_tokens(case, s)
        entered = obs[0].collectives
        expect(entered > 0, _at(mode, s, kind, 0, row[0], "collectives entered"), "at least one", entered)
        for r, o in enumerate(obs):
            at = lambda field: _at(mode, s, kind, r, row[r], field)  # noqa: E731
            expect_equal(at(f"collectives entered (rank 0 entered {entered})"), entered, o.collectives)
            expect_equal(at("gathered request counts"), row, o.request_counts)
            expect_equal(at("forward token counts"), tokens, o.forward_token_counts)
            expect_equal(at("forward mode is IDLE"), row[r] == 0, o.forward_mode == "IDLE")


@contract("RANKS-009", "in every verify mode and step kind, each DP rank's verify layout holds on idle ranks too: one "
          "length in [1, gamma+1] per request (gamma+1 in static mode), real rows sum(L) in compact mode and "
          "requests x (gamma+1) otherwise, none at a step without a verify or on an idle rank; every rank holds the "
          "same per-rank real and padded verify counts, padded all together to the smallest captured size that covers "
          "the largest rank's rows (replaying that graph), else not at all", requires={RANKS_STEPS}, cases=engine_cases,
          max_examples=BUDGET, examples=(GRAPH_CASE,))
def idle_rank_verify_layout_in_every_mode(engine, case):
    T = case.gamma + 1
    sizes = sorted({bs * T for bs in case.capture_bs})
    for mode, s, kind, obs in _steps(engine, case):
        row = case.batch_sizes[s]
        verifies = kind in VERIFY_KINDS
        real = []
        for r, o in enumerate(obs):
            at = lambda field: _at(mode, s, kind, r, row[r], field)  # noqa: E731
            bs = row[r] if verifies else 0
            expect_equal(at("verify lengths reported"), bs, len(o.verify_lens))
            expect(all(1 <= n <= T for n in o.verify_lens), at("verify lengths"), f"each in [1, {T}]", o.verify_lens)
            if mode == "static":
                expect_equal(at("verify lengths (static: every request verifies all)"), (T,) * bs, o.verify_lens)
            expect_equal(at(f"real verify rows (lengths {list(o.verify_lens)})"),
                         _verify_tokens(case, mode, o.verify_lens, bs), o.verify_tokens)
            real.append(o.verify_tokens)
        graph = oracle.smallest_size(sizes, max(real))
        padded = tuple([graph] * len(real)) if graph is not None else tuple(real)
        for r, o in enumerate(obs):
            at = lambda field: _at(mode, s, kind, r, row[r], field)  # noqa: E731
            expect_equal(at("every rank's real verify rows"), tuple(real), o.rank_verify_tokens)
            expect_equal(at(f"every rank's padded verify rows (sizes {sizes}, real {real})"), padded,
                         o.rank_padded_verify_tokens)
            expect_equal(at("verify rows run (its entry)"), padded[r], o.padded_verify_tokens)
            expect_equal(at(f"replays a verify graph (sizes {sizes}, real {real})"), graph is not None, o.verify_graph)


def _rows_intact(what, contributed, obs, row, mode, s, kind):
    """Every rank holds exactly the rows the ranks contributed, in rank order: nothing lost, duplicated or padded."""
    want = tuple(x for o in obs for x in contributed[o.rank])
    for r, o in enumerate(obs):
        got = getattr(o, what)
        if got != want:
            lost = sum(1 for x in want if x not in got)
            raise Mismatch(_at(mode, s, kind, r, row[r], f"{what} after the all-gather"),
                           f"{len(want)} rows: each rank's, in rank order",
                           f"{len(got)} rows ({lost} lost, {len(got) - len(want) + lost} extra: duplicates or padding), "
                           f"first rows {list(got[:3])}")


@contract("RANKS-010", "in every verify mode and step kind, after the forward's and the verify's all-gathers every DP "
          "rank, idle ones included, holds exactly each rank's real rows in rank order (an idle rank contributes none, "
          "no padding is kept), each rank's rows are its requests' positions (prompt positions, Q draft slots, the "
          "first L or gamma+1 verify positions), and each request accepts 0..L-1 drafts and commits one more",
          requires={RANKS_STEPS}, cases=engine_cases, max_examples=BUDGET)
def idle_rank_rows_intact_in_every_mode(engine, case):
    T, q = case.gamma + 1, case.draft_width
    for mode, s, kind, obs in _steps(engine, case):
        row = case.batch_sizes[s]
        for r, o in enumerate(obs):
            at = lambda field: _at(mode, s, kind, r, row[r], field)  # noqa: E731
            widths = case.prompt_lens[s][r] if kind == "prefill" else (q,) * row[r]
            expect_equal(at("(src_rank, req, pos) of its forward rows"),
                         tuple((r, i, j) for i, n in enumerate(widths) for j in range(n)),
                         tuple(x[1:] for x in o.forward_rows))
            lens = o.verify_lens if mode == "compact" else (T,) * len(o.verify_lens)
            expect_equal(at(f"(src_rank, req, pos) of its verify rows (lengths {list(o.verify_lens)})"),
                         tuple((r, i, j) for i, n in enumerate(lens) for j in range(n)),
                         tuple(x[1:] for x in o.verify_rows))
            expect_equal(at("accepted drafts reported"), len(o.verify_lens), len(o.correct_len))
            expect(all(0 <= c < n for c, n in zip(o.correct_len, o.verify_lens)), at("accepted drafts"),
                   f"each in [0, L-1] for L {list(o.verify_lens)}", o.correct_len)
            expect_equal(at("commit lengths"), tuple(c + 1 for c in o.correct_len), o.commit_len)
        _rows_intact("forward_gathered", {o.rank: o.forward_rows for o in obs}, obs, row, mode, s, kind)
        _rows_intact("verify_gathered", {o.rank: o.verify_rows for o in obs}, obs, row, mode, s, kind)

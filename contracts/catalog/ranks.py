"""Cross-rank contracts on real DP-attention rank processes (SGLang 0.5.23 B3, B6, G5, H2-H3).

Each contract runs the fixed scenarios of `contracts.strategies.ranks` (2 and 4 ranks,
idle ranks and an all-idle step included), one multi-process run per scenario shared by
all of them, and names the rank and step where an observation differs. The expected
values come from the scenario alone: request counts, Q, the captured buckets, budgets.
"""

from __future__ import annotations

from contracts import oracle
from contracts.checks import expect, expect_equal
from contracts.protocol import RANKS, RANKS_TP
from contracts.registry import contract
from contracts.strategies.ranks import SCENARIOS, TP_SCENARIOS
from contracts.violation import Mismatch


def _completed(engine, scenario):
    """The scenario's run; a run that failed is a mismatch naming the rank the engine blames."""
    run = engine.run_rank_scenario(scenario)
    if run.failure is not None:
        f = run.failure
        raise Mismatch(f"{scenario.name}: rank {f.rank} run", f"all {scenario.world_size} ranks complete "
                       f"every collective within {run.timeout_s:g}s", f"rank {f.rank} failed ({f.kind}): {f.message}")
    expect_equal(f"{scenario.name}: ranks reporting", scenario.world_size, len(run.ranks))
    for r, steps in enumerate(run.ranks):
        expect_equal(f"{scenario.name}: rank {r} steps reported", len(scenario.batch_sizes), len(steps))
    return run


def _each(engine):
    """(scenario, step, rank, observation) over every scenario, step and rank."""
    for scenario in SCENARIOS:
        run = _completed(engine, scenario)
        for s in range(len(scenario.batch_sizes)):
            for r in range(scenario.world_size):
                yield scenario, s, r, run.ranks[r][s]


def _at(scenario, s, r, field):
    return f"{scenario.name} step {s} rank {r}: {field}"


def _largest_plan(bs, budget, T):
    """The most verify tokens any plan of this rank can need: each request verifies 1..T tokens, the extra ones
    (beyond 1) within the budget. Found by walking the reachable extra totals request by request; -1: no budget."""
    if budget is None:
        return -1
    reachable = {0}
    for _ in range(bs):
        reachable = {e + x for e in reachable for x in range(T) if e + x <= budget}
    return bs + max(reachable)


@contract("RANKS-001", "every DP rank, idle ones included, holds the same per-rank token counts (rank_token_counts; "
          "SGLang's global_num_tokens): each rank's request count x draft width Q, in rank order; the device copy and the "
          "logprob counts agree",
          requires={RANKS})
def same_scaled_counts_on_every_rank(engine):
    for scenario, s, r, o in _each(engine):
        scaled = tuple(c * scenario.draft_width for c in scenario.batch_sizes[s])
        expect_equal(_at(scenario, s, r, "rank_token_counts"), scaled, o.rank_token_counts)
        expect_equal(_at(scenario, s, r, "rank_token_counts_device (values)"), scaled, o.rank_token_counts_device)
        expect_equal(_at(scenario, s, r, "rank_logprob_token_counts"), scaled, o.rank_logprob_token_counts)


@contract("RANKS-002", "every DP rank, idle ones included, holds the same per-rank request counts (rank_request_counts; "
          "SGLang's original_global_num_tokens_cpu): the gathered per-rank request counts, unscaled",
          requires={RANKS})
def same_raw_counts_on_every_rank(engine):
    for scenario, s, r, o in _each(engine):
        raw = tuple(scenario.batch_sizes[s])
        expect_equal(_at(scenario, s, r, "gathered request counts"), raw, o.raw_counts)
        expect_equal(_at(scenario, s, r, "rank_request_counts"), raw, o.rank_request_counts)


@contract("RANKS-003", "every DP rank picks the same CUDA-graph batch size: the smallest captured bucket >= the largest "
          "per-rank request count, none when that exceeds the largest bucket",
          requires={RANKS})
def same_graph_bucket_on_every_rank(engine):
    for scenario, s, r, o in _each(engine):
        expect_equal(_at(scenario, s, r, "graph batch size"), oracle.smallest_size(scenario.capture_bs, max(scenario.batch_sizes[s])),
                     o.graph_bs)


@contract("RANKS-004", "after the draft-token all-gather every rank holds exactly sum(scaled counts) real rows: each "
          "rank's bs*Q rows, intact and in rank order (nothing lost, duplicated or padded)",
          requires={RANKS})
def gathered_rows_intact(engine):
    for scenario in SCENARIOS:
        run = _completed(engine, scenario)
        q = scenario.draft_width
        for s, sizes in enumerate(scenario.batch_sizes):
            contributed = []
            for src in range(scenario.world_size):
                rows = run.ranks[src][s].local_rows
                expect_equal(f"{scenario.name} step {s} rank {src}: rows contributed", sizes[src] * q, len(rows))
                shape = tuple((src, i, j) for i in range(sizes[src]) for j in range(q))
                expect_equal(f"{scenario.name} step {s} rank {src}: (src_rank, req, pos) of its rows", shape,
                             tuple(row[1:] for row in rows))
                contributed.extend(rows)
            total = sum(sizes) * q
            for r in range(scenario.world_size):
                got = run.ranks[r][s].gathered_rows
                if len(got) != total or tuple(got) != tuple(contributed):
                    lost = sum(1 for row in contributed if row not in got)
                    extra = len(got) - (len(contributed) - lost)
                    raise Mismatch(_at(scenario, s, r, "gathered draft rows"),
                                   f"{total} rows = the ranks' {list(sizes)} requests x Q={q}, in rank order",
                                   f"{len(got)} rows ({lost} lost, {extra} extra: duplicates or padding), "
                                   f"first rows {list(got[:3])}")


@contract("RANKS-005", "idle DP ranks join every collective: every rank, idle or not, enters as many collectives as its "
          "peers each step and the run completes within the collective timeout (no deadlock)",
          requires={RANKS})
def idle_ranks_join_every_collective(engine):
    for scenario, s, r, o in _each(engine):
        busy = next((rr for rr in range(scenario.world_size) if scenario.batch_sizes[s][rr]), 0)
        reference = engine.run_rank_scenario(scenario).ranks[busy][s].collectives
        expect(reference > 0, _at(scenario, s, busy, "collectives entered"), "at least one", reference)
        expect_equal(_at(scenario, s, r, f"collectives entered (rank {busy} entered {reference})"), reference, o.collectives)
        expect_equal(_at(scenario, s, r, "draft forward mode"), "IDLE" if o.bs == 0 else "DRAFT_EXTEND", o.forward_mode)


@contract("RANKS-006", "under DP every rank verifies at the same tier: each rank's tier is the most verify tokens any of "
          "its plans can need (1..gamma+1 per request within its budget), and the shared tier is the smallest that covers "
          "every rank's; none when a rank has no budget or no rank verifies anything (SGLang G5)",
          requires={RANKS})
def same_verify_tier_on_every_rank(engine):
    for scenario, s, r, o in _each(engine):
        T = scenario.gamma + 1
        tiers = tuple(_largest_plan(bs, b, T) for bs, b in zip(scenario.batch_sizes[s], scenario.verify_budgets[s]))
        expect_equal(_at(scenario, s, r, "gathered verify tiers"), tiers, o.gathered_verify_tiers)
        covering = [t for t in range(max(tiers) + 1) if all(t >= x for x in tiers)]
        expected = None if any(t < 0 for t in tiers) or all(t == 0 for t in tiers) else min(covering)
        expect_equal(_at(scenario, s, r, "DP verify tier"), expected, o.verify_tier)


def _tp_run(engine, scenario):
    run = engine.run_tp_scenario(scenario)
    if run.failure is not None:
        f = run.failure
        raise Mismatch(f"{scenario.name}: rank {f.rank} run", f"all {scenario.world_size} ranks finish the step",
                       f"rank {f.rank} failed ({f.kind}): {f.message}")
    expect_equal(f"{scenario.name}: ranks reporting", scenario.world_size, len(run.ranks))
    return run


TP_FIELDS = ("verify_lens", "correct_len", "bonus", "cap_trim", "commit_len", "new_seq_lens")


@contract("RANKS-007", "the ranks of one tensor-parallel group verify alike: whatever their inputs' last bits, every rank "
          "ends the step with rank 0's verify lengths and accept results (correct_len, bonus, cap_trim, commit_len, "
          "new_seq_lens), and rank 0 verifies with its own plan", requires={RANKS_TP})
def tp_ranks_agree(engine):
    for scenario in TP_SCENARIOS:
        run = _tp_run(engine, scenario)
        first = run.ranks[0]
        expect(any(r.local_verify_lens != first.local_verify_lens for r in run.ranks[1:]),
               f"{scenario.name}: the ranks' own plans", "some rank plans differently from rank 0 (the scenario drifts)",
               [r.local_verify_lens for r in run.ranks])
        expect_equal(f"{scenario.name}: rank 0 verify_lens", first.local_verify_lens, first.verify_lens)
        for r in run.ranks[1:]:
            for field in TP_FIELDS:
                expect_equal(f"{scenario.name} rank {r.rank}: {field}", getattr(first, field), getattr(r, field))

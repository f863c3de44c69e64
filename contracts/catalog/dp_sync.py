"""Draft DP/MoE sync metadata and count scaling (SGLang 0.5.23 contracts B1-B6, C1-C2).

Field names are the DP level's engine-neutral ones (`contracts.boundary.dp`); each adapter maps its engine's
fields onto them. Seed bug: the DSpark draft forward batch lacked the raw per-rank request counts (read by
CUDA-graph admission) and the non-padded counts, so startup under DP attention crashed.
"""

from __future__ import annotations

import dataclasses

import torch

from contracts import oracle
from contracts.boundary.dp import COUNT_FIELDS, FLAG_FIELDS
from contracts.checks import expect, expect_dtype, expect_equal, expect_values
from contracts.protocol import DP_METADATA, DP_PADDING
from contracts.registry import contract
from contracts.strategies.dp import (
    PADDING_CASES,
    SEED_CASE,
    dp_padding_cases,
    dp_sync_cases,
    local_tokens_cases,
    scaling_cases,
)
from contracts.violation import Mismatch

SCALED = lambda: dp_sync_cases(moe_dp_sync=True, coordination=False, counts_present=True)  # noqa: E731
COORDINATED = lambda: dp_sync_cases(moe_dp_sync=True, coordination=True, counts_present=True)  # noqa: E731
SEED_COORDINATED = dataclasses.replace(SEED_CASE, prefill_coordination_applied=True, rank_counts=(0, 18, 12, 6),
                                       rank_logprob_counts=(0, 18, 12, 6), graph_replay_allowed=False,
                                       extend_in_batch=True)


def _syncs(case) -> bool:
    return case.moe_dp_sync and case.rank_counts is not None


def _fill(engine, case):
    """The filled draft batch; an idle rank with nothing to sync may build none, and then nothing can be wrong."""
    obs = engine.fill_draft_dp_metadata(case)
    if not obs.built:
        expect(case.bs == 0 and not _syncs(case), "draft forward batch", "built (a rank with requests, or DP-MoE sync)",
               "none built")
    return obs


def _counts_written(what: str, after: dict, counts, logprob_counts) -> None:
    expect_equal(f"{what}rank_token_counts", list(counts), after["rank_token_counts"])
    expect_equal(f"{what}rank_logprob_token_counts", list(logprob_counts), after["rank_logprob_token_counts"])
    for field, values in (("rank_token_counts_device", counts), ("rank_logprob_token_counts_device", logprob_counts)):
        expect(isinstance(after[field], torch.Tensor), f"{what}{field}", "a tensor", after[field])
        expect_dtype(f"{what}{field}", torch.int64, after[field])
        expect_values(f"{what}{field} (device copy)", list(values), after[field])


@contract("DPSYNC-001", "the per-rank request counts (rank_request_counts) are written unscaled",
          requires={DP_METADATA}, cases=SCALED, examples=(SEED_CASE,))
def original_counts_unscaled(engine, case):
    after = _fill(engine, case).after
    expect_equal("rank_request_counts", list(case.rank_counts), after["rank_request_counts"])


@contract("DPSYNC-002", "the per-rank token counts are the request counts x draft width Q; host and device copies agree",
          requires={DP_METADATA}, cases=SCALED, examples=(SEED_CASE,))
def counts_scaled_by_width(engine, case):
    after = _fill(engine, case).after
    q = case.draft_width
    _counts_written("", after, [c * q for c in case.rank_counts], [c * q for c in case.rank_logprob_counts])


@contract("DPSYNC-003", "with prefill coordination applied the counts are copied unscaled (never scaled twice)",
          requires={DP_METADATA}, cases=COORDINATED, examples=(SEED_COORDINATED,))
def coordinated_counts_not_rescaled(engine, case):
    after = _fill(engine, case).after
    _counts_written("", after, case.rank_counts, case.rank_logprob_counts)
    expect_equal("rank_request_counts", list(case.rank_counts), after["rank_request_counts"])


@contract("DPSYNC-004", "the non-padded count equals the draft batch's token count bs*Q: a host int always, an int32 device "
          "scalar when enabled",
          requires={DP_METADATA}, cases=dp_sync_cases, examples=(SEED_CASE,))
def non_padded_count(engine, case):
    obs = _fill(engine, case)
    if not obs.built:
        return
    n = case.bs * case.draft_width
    expect_equal("draft batch tokens", n, obs.num_tokens)
    after = obs.after
    host = after["non_padded_tokens"]
    expect(isinstance(host, int) and not isinstance(host, bool), "non_padded_tokens", "a host int", type(host).__name__)
    expect_equal("non_padded_tokens", n, host)
    fields = ["non_padded_tokens_device"] + (["global_non_padded_tokens_device"] if _syncs(case) else [])
    if _syncs(case):
        expect_equal("global_non_padded_tokens", n, after["global_non_padded_tokens"])
    for field in fields if case.device_non_padded_count else ():
        value = after[field]
        expect(isinstance(value, torch.Tensor) and value.numel() == 1, field, "a one-element device tensor", value)
        expect_dtype(field, torch.int32, value)
        expect_equal(field, n, int(value.reshape(())))


@contract("DPSYNC-005", "the graph and batch flags (graph_replay_allowed, extend_in_batch, prefill_coordination_applied) pass "
          "through on every branch",
          requires={DP_METADATA}, cases=dp_sync_cases, examples=(SEED_CASE, SEED_COORDINATED))
def flags_pass_through(engine, case):
    obs = _fill(engine, case)
    if not obs.built:
        return
    after = obs.after
    expected = dict(zip(FLAG_FIELDS, (case.graph_replay_allowed, case.extend_in_batch, case.prefill_coordination_applied)))
    for field, value in expected.items():
        expect_equal(field, value, after[field])


@contract("DPSYNC-006", "without DP-MoE sync or without counts, the fill writes no DP count field",
          requires={DP_METADATA}, cases=lambda: dp_sync_cases().filter(lambda c: not _syncs(c)))
def early_return_writes_nothing(engine, case):
    obs = _fill(engine, case)
    for field in COUNT_FIELDS + ("global_non_padded_tokens_device", "global_non_padded_tokens") if obs.built else ():
        expect_equal(field, obs.before[field], obs.after[field])


@contract("DPSYNC-007", "the proposer's fill and the engine's generic DP sync fill write the same DP count fields on the same inputs",
          requires={DP_METADATA}, cases=lambda: dp_sync_cases(moe_dp_sync=True, counts_present=True),
          examples=(SEED_CASE, SEED_COORDINATED))
def fill_agrees_with_init_mlp_sync(engine, case):
    fill = _fill(engine, case).after
    generic = engine.fill_scheduler_dp_metadata(case).after
    for field in COUNT_FIELDS:
        expect_equal(f"{field} (proposer fill vs generic fill)", generic[field], fill[field])


@contract("SCALE-001", "the count scaling multiplies each rank's count by the width, so it preserves length, "
          "order and zeros and is linear",
          requires={DP_METADATA}, cases=scaling_cases)
def scaling_is_elementwise(engine, case):
    scaled, scaled_lp = engine.scale_rank_counts(case.counts, case.other_counts, case.width, case.logprob_width)
    expect_equal("scaled counts", [c * case.width for c in case.counts], list(scaled))
    expect_equal("scaled logprob counts", [c * case.logprob_width for c in case.other_counts], list(scaled_lp))
    # Linear: scaling the sum of two count vectors (a second input) gives the sum of their scalings.
    summed = [a + b for a, b in zip(case.counts, case.other_counts)]
    both, _ = engine.scale_rank_counts(summed, summed, case.width, case.logprob_width)
    again, _ = engine.scale_rank_counts(case.other_counts, case.other_counts, case.width, case.logprob_width)
    expect_equal("scaled(counts + other counts)", [a + b for a, b in zip(scaled, again)], list(both))


@contract("DPSYNC-008", "attention-TP ranks split a DP rank's tokens: with its width padded to a multiple of the attention-TP "
          "size, each rank's local non-padded count lies in [0, width/tp], real tokens fill the ranks in order, and the "
          "counts add up to the global count", requires={DP_METADATA}, cases=local_tokens_cases)
def local_counts_add_up(engine, case):
    local = list(engine.local_non_padded_tokens(case))
    chunk = case.rank_width // case.attn_tp_size
    expect_equal(f"local counts ({case.attn_tp_size} ranks)", case.attn_tp_size, len(local))
    expect(all(0 <= n <= chunk for n in local), "local counts", f"each in [0, {chunk}]", local)
    expect(all(a >= b for a, b in zip(local, local[1:])) and all(a == chunk for a, b in zip(local, local[1:]) if b),
           "local counts", "full ranks first, then the partial one, then empty ones", local)
    expect_equal(f"sum of local counts (global {case.global_count}, width {case.rank_width})", case.global_count,
                 sum(local))


# ---- DP padding: how many tokens each DP rank runs after the ranks agree (contracts.boundary.dp.DpPaddingCase) ----

PADDING_BUDGET = 10  # each case (up to 6 steps) is one multi-process run on an engine with real ranks


def _padding_run(engine, case):
    run = engine.coordinate_dp_padding(case)
    world, n = case.world_size, len(case.steps)
    if run.failure is not None:
        raise Mismatch("rank run", f"all {world} ranks, idle ones included, complete every step's coordination",
                       run.failure)
    expect_equal("ranks reporting", world, len(run.ranks))
    for r, steps in enumerate(run.ranks):
        expect_equal(f"rank {r} steps reported", n, len(steps))
    return run


def _padding_steps(engine, case):
    """(step, [observation per rank], forward tokens per rank) for every step."""
    run = _padding_run(engine, case)
    for s in range(len(case.steps)):
        obs = [run.ranks[r][s] for r in range(case.world_size)]
        yield s, obs, [o.tokens for o in obs]


def _expected_lockstep(case, tokens):
    """(graphs replayed, microbatched, shared count) from first principles: graphs when one captured size covers the
    largest rank; microbatches when every rank asks and each rank's last part (the shared count split into equal
    parts, the last taking the rest) holds a real token of it."""
    size = oracle.smallest_size(case.graph_sizes, max(tokens))
    graph = size is not None
    shared = size if graph else max(tokens)
    n = case.microbatches
    micro = n > 1 and all(t >= case.microbatch_threshold and _last_part_holds_a_real_token(shared, n, t) for t in tokens)
    return graph, micro, shared


def _last_part_holds_a_real_token(shared, n, real):
    """Token positions 0..shared-1 dealt into n parts, the first n-1 of shared // n each and the last the rest;
    the rank's real tokens are positions 0..real-1."""
    positions = list(range(shared))
    size = shared // n
    parts = [positions[i * size:(i + 1) * size] for i in range(n - 1)] + [positions[(n - 1) * size:]]
    return any(p < real for p in parts[-1])


@contract("DPPAD-001", "DP padding: every DP rank, idle ones included, completes each step's coordination and holds the "
          "same per-rank padded counts, one per rank in rank order; each rank runs its own entry",
          requires={DP_PADDING}, cases=dp_padding_cases,
          max_examples=PADDING_BUDGET, examples=PADDING_CASES)
def padded_counts_agree(engine, case):
    for s, obs, _ in _padding_steps(engine, case):
        first = obs[0].rank_padded_tokens
        for r, o in enumerate(obs):
            expect(o.tokens >= 0, f"step {s} rank {r}: forward tokens", ">= 0", o.tokens)
            expect(o.rank_padded_tokens is not None and len(o.rank_padded_tokens) == case.world_size,
                   f"step {s} rank {r}: per-rank padded counts", f"{case.world_size} entries", o.rank_padded_tokens)
            expect_equal(f"step {s} rank {r}: per-rank padded counts (rank 0 holds {list(first)})", first,
                         o.rank_padded_tokens)
            expect_equal(f"step {s} rank {r}: tokens run (its entry of {list(first)})", first[r], o.padded_tokens)


@contract("DPPAD-002", "DP padding only adds tokens: each rank's padded count covers its forward's tokens, and ranks "
          "that run in lockstep (replaying graphs or microbatching) all run one count, at least the largest rank's",
          requires={DP_PADDING}, cases=dp_padding_cases, max_examples=PADDING_BUDGET, examples=PADDING_CASES)
def padding_covers_every_rank(engine, case):
    for s, obs, tokens in _padding_steps(engine, case):
        for r, o in enumerate(obs):
            expect(o.padded_tokens >= tokens[r], f"step {s} rank {r}: tokens run", f">= its {tokens[r]} tokens",
                   o.padded_tokens)
        if any(o.graph or o.microbatched for o in obs):
            counts = [o.padded_tokens for o in obs]
            expect(len(set(counts)) == 1 and counts[0] >= max(tokens), f"step {s}: tokens run in lockstep",
                   f"one count >= the largest rank's {max(tokens)} (tokens {tokens})", counts)


@contract("DPPAD-003", "DP padding with captured graphs: the ranks replay graphs all together or not at all, and "
          "together exactly when a captured size covers the largest rank's tokens; then every rank runs the smallest "
          "captured size >= that count", requires={DP_PADDING}, cases=dp_padding_cases, max_examples=PADDING_BUDGET,
          examples=PADDING_CASES)
def graph_padding_is_the_smallest_size(engine, case):
    for s, obs, tokens in _padding_steps(engine, case):
        graph, _, shared = _expected_lockstep(case, tokens)
        for r, o in enumerate(obs):
            expect_equal(f"step {s} rank {r}: replays a graph (sizes {list(case.graph_sizes)}, tokens {tokens})", graph,
                         o.graph)
            if graph:
                expect_equal(f"step {s} rank {r}: tokens run (smallest size >= {max(tokens)})", shared, o.padded_tokens)


@contract("DPPAD-004", "DP microbatching: the ranks split a step into microbatches all together or not at all, and "
          "together exactly when it is on, every rank's tokens reach the threshold and every rank's last microbatch "
          "(the shared count in equal parts, the last taking the rest) holds one of its real tokens; microbatched "
          "without graphs, every rank runs the largest rank's count", requires={DP_PADDING}, cases=dp_padding_cases,
          max_examples=PADDING_BUDGET, examples=PADDING_CASES)
def microbatching_is_all_or_none(engine, case):
    for s, obs, tokens in _padding_steps(engine, case):
        graph, micro, shared = _expected_lockstep(case, tokens)
        for r, o in enumerate(obs):
            expect_equal(f"step {s} rank {r}: microbatched ({case.microbatches} parts, threshold "
                         f"{case.microbatch_threshold}, shared {shared}, tokens {tokens})", micro, o.microbatched)
            if micro and not graph:
                expect_equal(f"step {s} rank {r}: tokens run microbatched without graphs", max(tokens), o.padded_tokens)


@contract("DPPAD-005", "DP padding without lockstep: when the ranks neither replay graphs nor microbatch, no rank is "
          "padded: each runs exactly its forward's tokens", requires={DP_PADDING}, cases=dp_padding_cases,
          max_examples=PADDING_BUDGET, examples=PADDING_CASES)
def no_padding_without_lockstep(engine, case):
    for s, obs, tokens in _padding_steps(engine, case):
        graph, micro, _ = _expected_lockstep(case, tokens)
        if graph or micro:
            continue
        for r, o in enumerate(obs):
            expect_equal(f"step {s} rank {r}: tokens run without lockstep (tokens {tokens})", tokens[r], o.padded_tokens)

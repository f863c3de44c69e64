"""CUDA-graph admission and capture geometry (SGLang 0.5.23 contracts H1-H3).

A captured graph has fixed geometry: `bs` request slots of `width` tokens. A live
batch may replay it only if the geometry holds the batch: enough slots (padding
rounds up, never down), the per-request width the graph was captured for, and,
under DP attention, a size every rank picks alike from the raw per-rank request
counts. Expectations come from the case and the captured sizes alone.
"""

from __future__ import annotations

from contracts import oracle
from contracts.boundary.graph import GraphCase
from contracts.checks import expect, expect_equal
from contracts.protocol import GRAPH
from contracts.registry import contract
from contracts.strategies.graph import graph_cases

GRAPH_MAX_BS = 64  # the largest default size asked of the engine: the cases' pools stay below 80


# The seed bug's class: under DP a graph size taken from token counts (requests x width) instead of request counts
# refuses or over-pads a batch that fits (3 requests of 4 tokens fit the size-8 graph; 12 tokens do not).
DP_TOKENS_VS_REQUESTS = GraphCase(capture_bs=(1, 2, 4, 8), max_running_requests=8, gamma=3, sample_from_anchor=False,
                                  runner="target", local_bs=2, batch_width=4, rank_counts=(2, 3), can_run_vote=True)


def _cases(*, engine):
    """Graph cases around the engine's own default capture sizes."""
    return graph_cases(engine.graph_default_capture_bs(GRAPH_MAX_BS))


def _raw(case) -> int:
    return max(case.rank_counts) if case.syncs_across_ranks else case.local_bs


def _observe(engine, case):
    obs = engine.graph_admission(case)
    expect(obs.error is None, "admission / replay", "no exception", obs.error)
    return obs


@contract("GRAPH-001", "the runner captures every configured size that fits the request pool, plus the pool size when "
          "a configured size exceeds it, sorted and distinct, at the width of its forward (T target, Q draft)",
          requires={GRAPH}, cases=_cases)
def captured_sizes(engine, case):
    obs = _observe(engine, case)
    pool = case.max_running_requests
    want = {c for c in case.capture_bs if c <= pool} | ({pool} if max(case.capture_bs) > pool else set())
    expect_equal("captured sizes", sorted(want), list(obs.captured_bs))
    expect_equal("captured width (tokens per request slot)", case.runner_width, obs.captured_width)


@contract("GRAPH-002", "an admitted batch replays the smallest captured size >= the largest per-rank raw request count "
          "(the local count without DP, or for a DP-local dense draft): never fewer slots than live requests, "
          "slots x width tokens",
          requires={GRAPH}, cases=_cases, examples=(DP_TOKENS_VS_REQUESTS,))
def smallest_bucket_that_fits(engine, case):
    obs = _observe(engine, case)
    if not obs.admitted:
        return
    raw = _raw(case)
    size = oracle.smallest_size(obs.captured_bs, raw)
    expect(size is not None, "admitted batch", f"a captured size >= {raw}", list(obs.captured_bs))
    expect_equal(f"replayed size (raw {raw}, captured {list(obs.captured_bs)})", size, obs.replay_bs)
    expect(obs.replay_bs >= case.local_bs, "replayed size", f">= the {case.local_bs} live requests (padding rounds up)",
           obs.replay_bs)
    expect_equal("live requests carried", case.local_bs, obs.raw_bs)
    expect_equal("replayed tokens", obs.replay_bs * obs.captured_width, obs.replay_tokens)


@contract("GRAPH-003", "a batch is admitted exactly when a captured graph holds it: its raw size fits the largest "
          "captured size, its per-request width is the captured width, and under DP every rank voted for graphs",
          requires={GRAPH}, cases=_cases, examples=(DP_TOKENS_VS_REQUESTS,))
def admitted_iff_geometry_holds(engine, case):
    obs = _observe(engine, case)
    holds = (_raw(case) <= max(obs.captured_bs) and case.batch_width == obs.captured_width
             and (case.rank_counts is None or case.can_run_vote))
    expect_equal(f"admitted (raw {_raw(case)}, width {case.batch_width} vs captured {obs.captured_width}, "
                 f"vote {case.can_run_vote}, DP {case.rank_counts is not None})", holds, obs.admitted)

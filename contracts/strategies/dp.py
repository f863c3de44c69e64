from __future__ import annotations

from hypothesis import strategies as st

from contracts.boundary.dp import DpPaddingCase, DpSyncCase, LocalTokensCase, ScalingCase

# Seed example from the historical DP-attention startup crash: Q=6, counts [1,3,0,2],
# the local rank holds 1 request, so 6 draft tokens are not padding.
SEED_CASE = DpSyncCase(bs=1, gamma=6, sample_from_anchor=True, rank_counts=(1, 3, 0, 2),
                       rank_logprob_counts=(1, 3, 0, 2),
                       moe_dp_sync=True, prefill_coordination_applied=False, device_non_padded_count=True,
                       graph_replay_allowed=True, extend_in_batch=False)

counts = st.integers(0, 512) | st.just(0)  # idle ranks are common, so zeros get their own branch


@st.composite
def rank_counts(draw, n_ranks: int, *, local: int | None = None):
    values = draw(st.lists(counts, min_size=n_ranks, max_size=n_ranks), label="counts")
    if local is not None:
        values[draw(st.integers(0, n_ranks - 1), label="dp_rank")] = local
    return tuple(values)


@st.composite
def dp_sync_cases(draw, *, moe_dp_sync=None, coordination=None, counts_present=None) -> DpSyncCase:
    """1..16 DP ranks, per-rank counts 0..512 with zeros, gamma 1..16 with or without the anchor row, bs 0..64
    (0: the local rank is DP-idle)."""
    # bs 0 about one draw in five (-16..0 all read as 0): drawn in 0..64, the idle local rank was the first example's
    # and then rare, and a 100-example run met it with busy peers once in seven contracts.
    bs = max(0, draw(st.integers(-16, 64), label="bs"))
    gamma = draw(st.integers(1, 16), label="gamma")
    sample_from_anchor = draw(st.booleans(), label="sample_from_anchor")
    width = gamma if sample_from_anchor else gamma + 1
    n_ranks = draw(st.integers(1, 16), label="dp_size")
    applied = draw(st.booleans(), label="prefill_coordination_applied") if coordination is None else coordination
    present = draw(st.booleans(), label="counts_present") if counts_present is None else counts_present
    gnt = lp = None
    if present:
        # Under coordination the plan already wrote token counts, so the local entry is bs*Q.
        gnt = draw(rank_counts(n_ranks, local=bs * width if applied else bs))
        lp = gnt if draw(st.booleans(), label="logprob_counts_same") else draw(rank_counts(n_ranks))
    return DpSyncCase(
        bs=bs,
        gamma=gamma,
        sample_from_anchor=sample_from_anchor,
        rank_counts=gnt,
        rank_logprob_counts=lp,
        moe_dp_sync=draw(st.booleans(), label="moe_dp_sync") if moe_dp_sync is None else moe_dp_sync,
        prefill_coordination_applied=applied,
        device_non_padded_count=draw(st.booleans(), label="device_non_padded_count"),
        graph_replay_allowed=draw(st.booleans(), label="graph_replay_allowed"),
        extend_in_batch=draw(st.booleans(), label="extend_in_batch"),
    )


@st.composite
def scaling_cases(draw) -> ScalingCase:
    n_ranks = draw(st.integers(1, 16), label="dp_size")
    a = draw(rank_counts(n_ranks))
    b = draw(rank_counts(n_ranks))
    width = draw(st.integers(1, 16), label="width")
    logprob_width = draw(st.integers(1, 16), label="logprob_width")
    return ScalingCase(a, b, width, logprob_width)


@st.composite
def local_tokens_cases(draw) -> LocalTokensCase:
    """An attention-TP size 1..8, a per-DP width padded to a multiple of it (0 included), any count up to it."""
    tp = draw(st.integers(1, 8), label="attn_tp_size")
    width = tp * draw(st.integers(0, 64), label="chunks")
    # The count drawn on the widest scale and cut to the width: a full rank stays full while tp and the width shrink
    # (a count drawn in 0..width fell out of range, so a failure at the full width kept the width it was found at).
    return LocalTokensCase(min(draw(st.integers(0, 8 * 64), label="global_count"), width), width, tp)


# DP padding. Token counts: idle (0), small (inside the graph sizes) and large (past them), so every step can mix
# ranks that replay a graph with ranks that cannot, and microbatch thresholds on both sides.
GRAPH_SIZES = (1, 2, 4, 8, 16, 32, 64)
rank_tokens = st.just(0) | st.integers(1, 70) | st.integers(100, 600)


@st.composite
def dp_padding_cases(draw) -> DpPaddingCase:
    """2..4 DP ranks, 1..6 steps of per-rank tokens (idle ranks and all-idle steps included), graph sizes from
    (1, 2, 4, ..., 64) or none, microbatching off or in 2, a threshold 2..64 (at least the number of microbatches),
    0..4 draft tokens."""
    world = draw(st.integers(2, 4), label="dp_size")
    n_steps = draw(st.integers(1, 6), label="steps")
    steps = tuple(tuple(draw(st.lists(rank_tokens, min_size=world, max_size=world), label="tokens"))
                  for _ in range(n_steps))
    sizes = draw(st.just(()) | st.lists(st.sampled_from(GRAPH_SIZES), min_size=1, unique=True).map(sorted),
                 label="graph_sizes")
    return DpPaddingCase(steps=steps, graph_sizes=tuple(sizes), microbatches=draw(st.sampled_from((1, 2)), label="microbatches"),
                         microbatch_threshold=draw(st.integers(2, 64), label="microbatch_threshold"),
                         draft_tokens=draw(st.integers(0, 4), label="draft_tokens"))


# Pinned examples: a mixed graph/eager step, a step whose last microbatch would be empty, idle and all-idle steps,
# asymmetric counts without graphs.
PADDING_CASES = (
    DpPaddingCase(steps=((5, 0), (3, 600), (9, 9), (0, 0), (1, 0), (2, 7)), graph_sizes=(1, 2, 4, 8, 16), microbatches=2,
                  microbatch_threshold=4, draft_tokens=3),
    DpPaddingCase(steps=((40, 9, 0), (30, 30, 30), (7, 130, 20)), graph_sizes=(), microbatches=2, microbatch_threshold=5,
                  draft_tokens=1),
    DpPaddingCase(steps=((3, 17, 0, 2), (64, 65, 1, 1)), graph_sizes=(2, 8, 32, 64), microbatches=1, microbatch_threshold=2,
                  draft_tokens=0),
)

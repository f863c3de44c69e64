from __future__ import annotations

from hypothesis import strategies as st

from contracts.boundary.dp import DpSyncCase, LocalTokensCase, ScalingCase

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
    """1..16 DP ranks, per-rank counts 0..512 with zeros, gamma 1..16 with or without the anchor row, bs 0..64."""
    bs = draw(st.integers(0, 64), label="bs")
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
    return LocalTokensCase(draw(st.integers(0, width), label="global_count"), width, tp)

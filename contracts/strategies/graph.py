from __future__ import annotations

from hypothesis import strategies as st

from contracts.boundary.graph import GraphCase

# SGLang's default decode sizes with speculative decoding, up to 64 (the pool clips them).
DEFAULT_CAPTURE_BS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 40, 44, 48, 52, 56, 60, 64)


@st.composite
def graph_cases(draw) -> GraphCase:
    """Capture sizes (default or drawn), a pool that may clip them, target or draft runner, a live batch up to
    past the largest graph, a batch width that matches or not, and DP ranks whose counts hold the local one."""
    capture_bs = draw(st.just(DEFAULT_CAPTURE_BS) | st.lists(st.integers(1, 48), min_size=1, max_size=8, unique=True)
                      .map(lambda xs: tuple(sorted(xs))), label="capture_bs")
    pool = draw(st.integers(1, 80), label="max_running_requests")
    gamma = draw(st.integers(1, 8), label="gamma")
    sample_from_anchor = draw(st.booleans(), label="sample_from_anchor")
    runner = draw(st.sampled_from(("target", "draft")), label="runner")
    width = (gamma + 1) if runner == "target" else (gamma if sample_from_anchor else gamma + 1)
    batch_width = draw(st.sampled_from((width, width, width, width + 1, max(1, width - 1))), label="batch_width")
    local_bs = draw(st.integers(0, pool + 4), label="local_bs")
    counts = None
    if draw(st.booleans(), label="dp_attention"):
        others = draw(st.lists(st.integers(0, pool + 4), min_size=1, max_size=4), label="peer_counts")
        at = draw(st.integers(0, len(others)), label="dp_rank")
        counts = tuple(others[:at] + [local_bs] + others[at:])
    return GraphCase(capture_bs, pool, gamma, sample_from_anchor, runner, local_bs, batch_width, counts,
                     draw(st.booleans(), label="can_run_vote"), draw(st.booleans(), label="draft_is_moe"))

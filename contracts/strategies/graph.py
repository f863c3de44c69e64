from __future__ import annotations

from hypothesis import strategies as st

from contracts.boundary.graph import GraphCase

# Without an engine (the strategy's own tests): SGLang 0.5.23's default decode sizes with speculative decoding, up to 64.
# The contracts draw from the engine's own defaults (GraphLevel.graph_default_capture_bs).
DEFAULT_CAPTURE_BS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 40, 44, 48, 52, 56, 60, 64)


def size_edges(capture_bs, pool: int) -> list:
    """The batch sizes where admission and padding change: 0, each captured size and its neighbours, the pool and
    one past it, one past the largest size."""
    edges = {0, pool, pool + 1, max(capture_bs) + 1}
    for size in capture_bs:
        edges |= {size - 1, size, size + 1}
    return sorted(e for e in edges if e >= 0)


@st.composite
def graph_cases(draw, default_capture_bs=DEFAULT_CAPTURE_BS) -> GraphCase:
    """Capture sizes (the engine's defaults, `default_capture_bs`, or drawn), a pool that may clip them, target or
    draft runner, a live batch biased to the sizes' edges (at, just below and just past each captured size, past the
    largest and past the pool), a batch width that matches or not, and DP ranks whose counts hold the local one."""
    default_capture_bs = tuple(default_capture_bs)
    capture_bs = draw(st.just(default_capture_bs) | st.lists(st.integers(1, 48), min_size=1, max_size=8, unique=True)
                      .map(lambda xs: tuple(sorted(xs))), label="capture_bs")
    pool = draw(st.integers(1, 80), label="max_running_requests")
    gamma = draw(st.integers(1, 8), label="gamma")
    sample_from_anchor = draw(st.booleans(), label="sample_from_anchor")
    runner = draw(st.sampled_from(("target", "draft")), label="runner")
    width = (gamma + 1) if runner == "target" else (gamma if sample_from_anchor else gamma + 1)
    batch_width = draw(st.sampled_from((width, width, width, width + 1, max(1, width - 1))), label="batch_width")
    local_bs = draw(st.integers(0, pool + 4) | st.sampled_from(size_edges(capture_bs, pool)), label="local_bs")
    counts = None
    if draw(st.booleans(), label="dp_attention"):
        others = draw(st.lists(st.integers(0, pool + 4), min_size=1, max_size=4), label="peer_counts")
        at = draw(st.integers(0, len(others)), label="dp_rank")
        counts = tuple(others[:at] + [local_bs] + others[at:])
    return GraphCase(capture_bs, pool, gamma, sample_from_anchor, runner, local_bs, batch_width, counts,
                     draw(st.booleans(), label="can_run_vote"), draw(st.booleans(), label="draft_is_moe"))

from __future__ import annotations

from hypothesis import strategies as st

from contracts.boundary.draft import DraftCase


@st.composite
def draft_cases(draw) -> DraftCase:
    """1..6 requests, gamma 1..7, either draft width, committed lengths 1..200, any commit in 1..gamma+1."""
    bs = draw(st.integers(1, 6), label="bs")
    gamma = draw(st.integers(1, 7), label="gamma")
    ints = lambda lo, hi: st.lists(st.integers(lo, hi), min_size=bs, max_size=bs).map(tuple)  # noqa: E731
    return DraftCase(gamma, draw(st.booleans(), label="sample_from_anchor"), draw(ints(1, 200), label="prefix_lens"),
                     draw(ints(0, 62), label="bonus_tokens"), draw(ints(1, gamma + 1), label="commit_lens"),
                     draw(st.integers(0, 3), label="seed"))

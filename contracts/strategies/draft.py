from __future__ import annotations

from hypothesis import strategies as st

from contracts.boundary.draft import DraftCase

MAX_GAMMA = 7
# A request: (committed length, anchor token, commit code). The commit is drawn on the largest window's scale, 1..8,
# and scaled to the request's own T = gamma + 1 (`_commit_len`), so 1 and T stay 1 and T while gamma shrinks.
REQUEST = st.tuples(st.integers(1, 200), st.integers(0, 62), st.integers(1, MAX_GAMMA + 1))


def _commit_len(code: int, gamma: int) -> int:
    """1..T from a code in 1..MAX_GAMMA+1: the lowest code is 1, the highest is T, every value in between is met."""
    return -(-code * (gamma + 1) // (MAX_GAMMA + 1))


@st.composite
def draft_cases(draw) -> DraftCase:
    """1..6 requests, gamma 1..7, either draft width, committed lengths 1..200, any commit in 1..gamma+1."""
    # One list of whole requests, so shrinking deletes requests: with a drawn bs and one list of that length per
    # field, every shrink of bs misaligned the lists after it, and a failure in one request kept five.
    gamma = draw(st.integers(1, MAX_GAMMA), label="gamma")
    anchor = draw(st.booleans(), label="sample_from_anchor")
    reqs = draw(st.lists(REQUEST, min_size=1, max_size=6), label="requests")
    prefix, bonus, codes = zip(*reqs)
    return DraftCase(gamma, anchor, tuple(prefix), tuple(bonus), tuple(_commit_len(c, gamma) for c in codes),
                     draw(st.integers(0, 3), label="seed"))

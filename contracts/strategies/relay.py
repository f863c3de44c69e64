"""Relay cases: small pools, so that rows are freed and taken again while their old history is still in the relay."""

from __future__ import annotations

from hypothesis import strategies as st

from contracts.boundary.relay import RelayCase, RelayStep

# A request leaves at step 2 and another takes its row at once: the row's history is one step old.
REUSE_CASE = RelayCase(pool_size=2, gamma=2, overlap=True,
                       steps=(RelayStep(join=(0, 1)), RelayStep(), RelayStep(leave=(0,), join=(2,)), RelayStep(), RelayStep()))


@st.composite
def relay_cases(draw, max_steps: int = 8) -> RelayCase:
    pool = draw(st.integers(1, 4), label="pool_size")
    steps, live, next_rid = [], [], 0
    for _ in range(draw(st.integers(1, max_steps), label="n_steps")):
        leave = tuple(r for r in live if draw(st.booleans(), label=f"leave {r}")) if live else ()
        live = [r for r in live if r not in leave]
        n = draw(st.integers(0 if live else 1, pool - len(live)), label="join") if pool > len(live) else 0
        join = tuple(range(next_rid, next_rid + n))
        next_rid += n
        live += list(join)  # never empty: with no one left, at least one joins
        steps.append(RelayStep(leave, join))
    return RelayCase(pool, draw(st.integers(1, 4), label="gamma"), draw(st.booleans(), label="overlap"), tuple(steps))

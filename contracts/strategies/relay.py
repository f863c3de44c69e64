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


# Request 0 leaves after step 1; request 2 takes its row before step 2 and joins at step 4 (its transfer spans steps 2
# and 3): its first two steps read snapshots taken after its row was taken.
PREALLOC_CASE = RelayCase(pool_size=2, gamma=2, overlap=True,
                          steps=(RelayStep(join=(0, 1)), RelayStep(), RelayStep(leave=(0,), prealloc=(2,)), RelayStep(),
                                 RelayStep(join=(2,)), RelayStep(), RelayStep()), pd_decode=True)


@st.composite
def prealloc_relay_cases(draw, max_steps: int = 8, max_lead: int = 3) -> RelayCase:
    """A PD decode server's relay case (overlap on) where requests joining after step 0 may take their rows up to `max_lead` steps
    early (a PD decode server's pre-allocation), within the pool: at every step the live and the pre-allocated
    requests together hold at most `pool_size` rows. A lead shrinks towards 0 (the row taken at the join)."""
    case = draw(relay_cases(max_steps), label="relay")
    batches, taken = case.batches(), {}
    joins = [(s, rid) for s, step in enumerate(case.steps) for rid in step.join if s > 0]
    for s, rid in joins:
        lead = draw(st.integers(0, min(s, max_lead)), label=f"lead {rid}")
        while lead and any(len(batches[t]) + sum(1 for r, (a, j) in taken.items() if a <= t < j) + 1 > case.pool_size
                           for t in range(s - lead, s)):
            lead -= 1  # the pool has no free row that early
        if lead:
            taken[rid] = (s - lead, s)
    steps = tuple(RelayStep(step.leave, step.join, tuple(r for r, (a, _) in sorted(taken.items()) if a == s))
                  for s, step in enumerate(case.steps))
    return RelayCase(case.pool_size, case.gamma, True, steps, pd_decode=True)

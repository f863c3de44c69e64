"""Fixed multi-rank scenarios: process spawning is slow, so the ranks contracts run these, not 100 draws.

Chosen so that each one has idle ranks, an all-idle step, a rank without a verify
budget, a step whose largest rank overflows the captured graph buckets, and a step
where scaled counts would pick a different bucket than request counts.
"""

from __future__ import annotations

from hypothesis import strategies as st

from contracts.boundary.ranks import RankScenario

TWO_RANKS = RankScenario(
    name="2-ranks-Q4",
    world_size=2,
    batch_sizes=((3, 0), (0, 2), (0, 0), (9, 1), (2, 2)),
    verify_budgets=((5, 0), (0, None), (0, 0), (12, 3), (None, 4)),
    gamma=4,
    sample_from_anchor=True,
    capture_bs=(1, 2, 4, 8),
    max_running_requests=16,
)

FOUR_RANKS = RankScenario(
    name="4-ranks-Q3",
    world_size=4,
    batch_sizes=((2, 0, 1, 3), (0, 0, 0, 4), (1, 1, 1, 1), (0, 6, 0, 0), (0, 0, 0, 0)),
    verify_budgets=((1, 0, 2, None), (0, 0, 0, 8), (0, 0, 0, 0), (0, 9, 0, 0), (0, 0, 0, 0)),
    gamma=2,
    sample_from_anchor=False,  # Q = gamma + 1 = 3
    capture_bs=(1, 2, 4, 8, 16),
    max_running_requests=16,
)

SCENARIOS = (TWO_RANKS, FOUR_RANKS)


@st.composite
def small_rank_scenarios(draw, max_world: int = 4, max_steps: int = 4) -> RankScenario:
    """Random small scenarios, for callers that want more than the fixed ones (each costs a multi-process run)."""
    world = draw(st.integers(1, max_world), label="world_size")
    steps = draw(st.integers(1, max_steps), label="steps")
    gamma = draw(st.integers(1, 6), label="gamma")
    sizes, budgets = [], []
    for _ in range(steps):
        row = tuple(draw(st.lists(st.integers(0, 6) | st.just(0), min_size=world, max_size=world)))
        sizes.append(row)
        budgets.append(tuple(draw(st.none() | st.integers(0, bs * gamma)) for bs in row))
    return RankScenario(name="drawn", world_size=world, batch_sizes=tuple(sizes), verify_budgets=tuple(budgets), gamma=gamma,
                        sample_from_anchor=draw(st.booleans()), capture_bs=(1, 2, 4), max_running_requests=8)

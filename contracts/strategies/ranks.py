"""Fixed multi-rank scenarios: process spawning is slow, so the ranks contracts run these, not 100 draws.

Chosen so that each one has idle ranks, an all-idle step, a rank without a verify
budget, a step whose largest rank's scaled token count overflows the captured graph
buckets, and a step where scaled counts would pick a different bucket than request
counts.

For a tensor-parallel scenario, also what each rank computes from it (`tp_inputs`) and how an engine's TP rank
program runs it (`run_tp`, on the launcher's rank processes).
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from contracts.boundary.dp import DpPaddingCase, DpPaddingRank, DpPaddingRun
from contracts.boundary.ranks import RankRunFailure, RankScenario, TpRun, TpScenario
from contracts.launcher import DEFAULT_STARTUP_TIMEOUT_S, RankFailure, launch

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


# A TP group's verify step with per-rank drift: near-tied confidence and target logits, so that a rank left
# to itself picks other verify lengths and accepts other drafts than rank 0.
TP_SCENARIOS = (
    TpScenario("tp2-near-ties", world_size=2, bs=6, gamma=4, vocab=6, budget=7, divergence=1e-3, seed=1),
    TpScenario("tp3-near-ties", world_size=3, bs=5, gamma=3, vocab=5, budget=4, divergence=1e-3, seed=2),
)


def tp_inputs(scenario: TpScenario, rank: int):
    """(confidence [bs, gamma], candidates [bs, T], target_logits [bs, T, V], prefix_lens [bs]) of one rank.

    The shared part is a function of the seed; `rank` only adds its drift, so rank 0's inputs are the
    scenario's and the others differ from them by at most `divergence`."""
    bs, gamma, v = scenario.bs, scenario.gamma, scenario.vocab
    g = torch.Generator().manual_seed(scenario.seed)
    # Confidences on a few levels (ties) and logits with two near-equal maxima per row (near ties).
    conf = torch.tensor([0.5, 0.7, 0.9], dtype=torch.float64)[torch.randint(0, 3, (bs, gamma), generator=g)]
    logits = torch.randn(bs, gamma + 1, v, generator=g, dtype=torch.float64)
    top2 = torch.topk(logits, 2, dim=-1).indices
    logits.scatter_(-1, top2[..., 1:], logits.gather(-1, top2[..., :1]))  # the top two tie exactly
    anchor = torch.randint(0, v, (bs, 1), generator=g)
    drafts = top2[:, :gamma, 0] if gamma else torch.zeros(bs, 0, dtype=torch.int64)  # one of the tied argmaxes
    prefix = torch.randint(1, 100, (bs,), generator=g)
    drift = torch.Generator().manual_seed(scenario.seed * 1009 + rank + 1)
    if rank:
        conf = (conf + scenario.divergence * (torch.rand(bs, gamma, generator=drift, dtype=torch.float64) - 0.5)).clamp(0, 1)
        logits = logits + scenario.divergence * torch.rand(logits.shape, generator=drift, dtype=torch.float64)
    return conf, torch.cat([anchor, drafts], 1), logits, prefix


def run_tp(scenario: TpScenario, program, backend: str = "gloo", startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S) -> TpRun:
    """`program(rank, scenario, comm)` on `scenario.world_size` rank processes; each rank's run() returns
    [its TpRankResult] (one step)."""
    try:
        result = launch(program, scenario, scenario.world_size, backend=backend, startup_timeout_s=startup_timeout_s)
    except RankFailure as e:
        return TpRun(scenario, (), RankRunFailure.of(e))
    return TpRun(scenario, tuple(obs[0] for obs in result.observations), None)


def run_dp_padding(case: DpPaddingCase, program) -> DpPaddingRun:
    """`program(rank, case, comm)` on `case.world_size` gloo rank processes, one observation (a DpPaddingRank's
    fields) per rank and step; a rank failure is the run's `failure`, not an exception."""
    import time

    t0 = time.monotonic()
    try:
        observations, failure = launch(program, case, case.world_size, steps=len(case.steps),
                                       backend="gloo").observations, None
    except RankFailure as e:
        observations, failure = (), f"rank {e.rank} failed ({e.kind}): {e}"
    ranks = tuple(tuple(DpPaddingRank(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in o.items()})
                        for o in per_rank) for per_rank in observations)
    return DpPaddingRun(case, ranks, failure, time.monotonic() - t0)

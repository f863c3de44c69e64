"""Whole DP steps with idle ranks, in every verify mode and step kind an engine's ranks run (`RankStepsCase`).

A case's steps run once in each of its verify modes (one launch), and every step holds an idle rank beside a busy
one (an `idle` step: every rank idle), so each (verify mode, step kind) pair a case reaches, it reaches with an
idle rank; tests/property/test_rank_steps.py draws many cases and checks that every pair appears. A failing case
shrinks towards 2 ranks, one step, rank 0 idle and rank 1 with one request, gamma 1, no graphs, seed 0: the
smallest case where an idle rank meets work, in the one verify mode that fails.
"""

from __future__ import annotations

from hypothesis import strategies as st

from contracts.boundary.ranks import STEP_KINDS, VERIFY_MODES, RankStepsCase

# The largest captured batch size: none (no graphs), or powers of two up to it. With up to 3 requests a rank, 1 and 2
# leave a busy rank that no captured size covers (the ranks then verify eagerly), 4 covers every rank.
LARGEST_CAPTURED = (None, 1, 2, 4)
BUDGET_FRACS = (0.01, 0.25, 0.5, 1.0)  # in (0, 1]; 0.01: no extra verify token at these sizes


@st.composite
def step_row(draw, kind: str, world: int, max_world: int) -> tuple:
    """One step's per-rank request counts: all 0 at an `idle` step, else one idle rank and one busy one at least."""
    if kind == "idle":
        return (0,) * world
    # Drawn for the largest world and cut to this one: the draws keep their places while the world shrinks.
    row = draw(st.lists(st.integers(0, 3), min_size=max_world, max_size=max_world), label="requests")[:world]
    idle = draw(st.integers(0, world - 1), label="idle_rank")
    busy = draw(st.integers(0, world - 2), label="busy_rank")
    busy += busy >= idle  # any rank but the idle one
    row[idle], row[busy] = 0, max(row[busy], 1)
    return tuple(row)


@st.composite
def rank_steps_cases(draw, modes=VERIFY_MODES, kinds=STEP_KINDS, *, max_world: int = 3,
                     max_steps: int = 4) -> RankStepsCase:
    """2..max_world ranks, 1..max_steps steps of the given kinds, run in one or more of the given verify modes (all
    of them in about 4 cases of 10, so that a few cases reach every mode), 0..3 requests a rank, prompts of 1..6
    tokens, gamma 1..4, captured sizes (1), (1, 2), (1, 2, 4) or none, a forced budget fraction (the ragged modes) or
    the engine's own budget."""
    modes, kinds = tuple(m for m in VERIFY_MODES if m in modes), tuple(k for k in STEP_KINDS if k in kinds)
    world = draw(st.integers(2, max_world), label="world_size")
    # Each mode runs 3 draws in 4 (all of them in about 4 cases of 10) and shrinks towards not running; with none
    # left, the one mode `only_mode` names runs, so a failure shrinks to the one mode that fails.
    keep = [draw(st.integers(0, 3), label=f"runs {m}") > 0 for m in modes]
    only = draw(st.sampled_from(modes), label="only_mode")
    run_modes = tuple(m for m, k in zip(modes, keep) if k) or (only,)
    # Each step's draws lie together (its kind, requests and prompts), so that the shrinker can drop a whole step.
    step_kinds, rows, prompts = [], [], []
    for _ in range(draw(st.integers(1, max_steps), label="steps")):
        kind = draw(st.sampled_from(kinds), label="kind")
        row = draw(step_row(kind, world, max_world))
        step_kinds.append(kind)
        rows.append(row)
        prompts.append(tuple(tuple(draw(st.lists(st.integers(1, 6), min_size=c, max_size=c), label="prompt_lens"))
                             if kind == "prefill" else () for c in row))
    largest = draw(st.sampled_from(LARGEST_CAPTURED), label="largest_captured_bs")
    sizes = () if largest is None else tuple(1 << i for i in range(largest.bit_length()))
    frac = draw(st.none() | st.sampled_from(BUDGET_FRACS), label="budget_frac")
    return RankStepsCase(world_size=world, verify_modes=tuple(m for m in modes if m in run_modes),
                         gamma=draw(st.integers(1, 4), label="gamma"), kinds=tuple(step_kinds),
                         batch_sizes=tuple(rows), prompt_lens=tuple(prompts), capture_bs=tuple(sizes),
                         budget_frac=frac, sample_from_anchor=draw(st.booleans(), label="sample_from_anchor"),
                         seed=draw(st.integers(0, 7), label="seed"))


def engine_cases(engine):
    """The cases of the modes and kinds `engine` declares for its ranks."""
    return rank_steps_cases(engine.rank_verify_modes, engine.rank_step_kinds)

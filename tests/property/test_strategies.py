"""The strategies themselves, tested the way Hypothesis tests its own: with `hypothesis.find`.

Two kinds of test for each strategy module under `contracts/strategies/`:

* reach: each boundary a strategy promises in its docstring (gamma 1 and the largest gamma, the vocabulary's
  extremes, empty and idle batches, the largest batches and worlds, budgets 0 and full, greedy and sampled rows,
  top-k / top-p cuts, page size 1, ...) is found: `find(strategy, boundary)` succeeds, well within a budget of a
  few hundred examples. All of a strategy's boundaries are searched for in one `find` (`reaches`), which fails
  naming the boundaries it did not meet.
* shrink: `minimal(strategy, failure)` is the smallest case showing the failure (exactly 3 requests, one idle rank,
  gamma 1, token 0, ...): a contract's counterexample is only as small as its strategy lets the shrinker make it.

Every search runs under `settings(database=None, derandomize=True)`: nothing is saved, and the search is the same
from run to run (up to Hypothesis' own internals, so each boundary is met with a wide margin, not just in time).
"""

from __future__ import annotations

import pkgutil

import pytest
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

import contracts.strategies
from contracts import oracle, request_oracle
from contracts.boundary.dp import DpPaddingCase, DpSyncCase, LocalTokensCase, ScalingCase
from contracts.boundary.draft import DraftCase
from contracts.boundary.engine import EngineSpec, LayoutCase, RequestSpec, ScheduleCase
from contracts.boundary.handoff import HandoffCase
from contracts.boundary.ranks import STEP_KINDS, VERIFY_MODES, RankStepsCase
from contracts.boundary.relay import RelayCase, RelayStep
from contracts.boundary.verify import DyadicCase, MarkovCase, ValueCase, VerifyCase
from contracts.strategies import (
    dp,
    draft,
    engine,
    graph,
    handoff,
    kv,
    options,
    rank_steps,
    ranks,
    relay,
    request,
    schedules,
    verify,
)

REACH_EXAMPLES = 600  # the search budget of a reach test: every boundary is met well within it
SHRINK_EXAMPLES = 300


def _settings(max_examples: int, *, shrink: bool) -> settings:
    phases = (Phase.generate, Phase.shrink) if shrink else (Phase.generate,)
    return settings(database=None, derandomize=True, deadline=None, max_examples=max_examples, phases=phases)


def find_any(strategy, condition, max_examples=REACH_EXAMPLES):
    """Some example satisfying `condition`, not shrunk (reaching it is the point)."""
    return find(strategy, condition, settings=_settings(max_examples, shrink=False))


def minimal(strategy, condition=lambda x: True, max_examples=SHRINK_EXAMPLES):
    """The smallest example satisfying `condition`, as the shrinker leaves it (Hypothesis' own tests' `minimal`)."""
    return find(strategy, condition, settings=_settings(max_examples, shrink=True))


def reaches(strategy, boundaries: dict, max_examples=REACH_EXAMPLES) -> None:
    """Every boundary is met: one `find` for a case after which none is left unmet (a `find(strategy, boundary)`
    per boundary, run as one search so as not to draw the same examples once per boundary)."""
    unmet = dict(boundaries)

    def all_met(case) -> bool:
        for name in [name for name, met in unmet.items() if met(case)]:
            del unmet[name]
        return not unmet

    try:
        find_any(strategy, all_met, max_examples)
    except NoSuchExample:
        pytest.fail(f"not reached in {max_examples} examples: {sorted(unmet)}")


REACH: dict = {}  # "module.strategy" -> (strategy, {boundary: predicate})
BUDGET: dict = {}  # "module.strategy" -> a search budget other than REACH_EXAMPLES


def _idle_and_busy(counts) -> bool:
    return counts is not None and 0 in counts and any(counts)


# ---- verify ---------------------------------------------------------------------------------------------------------


def _caps_all(c, value) -> bool:
    return c.verify_lens is not None and c.bs > 0 and set(c.verify_lens) == {value}


REACH["verify.verify_cases"] = (verify.verify_cases(), {
    "bs 0": lambda c: c.bs == 0,
    "bs 16": lambda c: c.bs == 16,
    "gamma 1": lambda c: c.gamma == 1 and c.bs > 0,
    "gamma 8": lambda c: c.gamma == 8,
    "vocab 2": lambda c: c.vocab == 2 and c.bs > 0,
    "vocab 64": lambda c: c.vocab == 64,
    "every row capped at 1": lambda c: _caps_all(c, 1),
    "every row capped at gamma+1": lambda c: c.gamma > 1 and _caps_all(c, c.gamma + 1),
    "caps per row": lambda c: c.verify_lens is not None and len(set(c.verify_lens)) > 1,
    "one-hot draft": lambda c: c.draft_family == "one_hot" and c.bs > 0,
    "greedy and sampled rows": lambda c: c.greedy is not None and any(c.greedy) and not all(c.greedy),
    "float32": lambda c: c.dtype == "float32",
    "temperature below 1": lambda c: c.temperature < 1,
    "temperature above 1": lambda c: c.temperature > 1,
    "top-k inside the vocabulary": lambda c: 0 < c.top_k < c.vocab,
    "top-k past the vocabulary": lambda c: c.top_k >= c.vocab,
    "top-p": lambda c: c.top_p < 1,
    "mixed families and modes": lambda c: c.target_family == "mixed" and c.draft_mode == "mixed",
    **{f"family {f}": (lambda c, f=f: c.target_family == f) for f in verify.FAMILIES},
    **{f"draft mode {m}": (lambda c, m=m: c.draft_mode == m) for m in verify.DRAFT_MODES},
})

REACH["verify.value_cases"] = (verify.value_cases(), {
    "bs 0": lambda c: c.bs == 0,
    "bs 4": lambda c: c.bs == 4,
    "gamma 4": lambda c: c.gamma == 4,
    "vocab 6": lambda c: c.vocab == 6,
    "logit 3": lambda c: any(3 in row for rows in c.logits for row in rows),
    "tied maxima": lambda c: any(row.count(max(row)) > 1 for rows in c.logits for row in rows),
    "coin 15/16": lambda c: any(15 in coins for coins in c.coins_sixteenths),
    "the last token drafted": lambda c: any(c.vocab - 1 in cand for cand in c.candidates),
    "a spread draft row": lambda c: c.draft_eighths is not None and any(max(r) < 8 for rows in c.draft_eighths for r in rows),
    "one-hot draft": lambda c: c.draft_eighths is None and c.bs > 0,
    "caps 1 and gamma+1": lambda c: c.gamma > 1 and c.verify_lens is not None and {1, c.gamma + 1} <= set(c.verify_lens),
    "greedy and sampled rows": lambda c: c.greedy is not None and any(c.greedy) and not all(c.greedy),
})

REACH["verify.dyadic_cases"] = (verify.dyadic_cases(), {
    "bs 3": lambda c: c.bs == 3,
    "gamma 4": lambda c: c.gamma == 4,
    "vocab 5": lambda c: c.vocab == 5,
    "coin 15/16": lambda c: any(15 in coins for coins in c.coins_sixteenths),
    "one-hot draft": lambda c: c.draft_eighths is None,
    "capped": lambda c: c.verify_lens is not None,
})

REACH["verify.markov_cases"] = (verify.markov_cases(), {
    "bs 8": lambda c: c.bs == 8,
    "vocab 8": lambda c: c.vocab == 8,
    "gamma 6": lambda c: c.gamma == 6,
    "a greedy drafter": lambda c: c.draft_family == "target_greedy",
})

# max_blocks bounds vocab ** gamma; both of its edges are met: the widest vocabulary, the deepest block.
REACH["verify.markov_cases(max_blocks)"] = (verify.markov_cases(max_bs=1, max_vocab=4, max_gamma=3, max_blocks=27), {
    "vocab 4": lambda c: c.vocab == 4,
    "gamma 3": lambda c: c.gamma == 3,
})

REACH["verify.any_cases"] = (verify.any_cases(), {
    "a recipe": lambda c: isinstance(c, VerifyCase),
    "values": lambda c: isinstance(c, ValueCase),
})


def test_markov_blocks_stay_enumerable():
    @settings(database=None, derandomize=True, max_examples=50)
    @given(verify.markov_cases(max_bs=1, max_vocab=4, max_gamma=3, max_blocks=27))
    def blocks(c):
        assert c.vocab ** c.gamma <= 27

    blocks()


def _recipe(**fields) -> VerifyCase:
    base = dict(bs=0, gamma=1, vocab=2, target_family="sparse", draft_family="sparse", draft_mode="sampled", seed=0)
    return VerifyCase(**{**base, **fields})


def _plain_but(case, **fields) -> None:
    """`case` is the plainest recipe but for `fields`. Its draft is the first family or one-hot: the shrinker ranks a
    shorter choice sequence first, and a one-hot draft skips the draft family's choice."""
    assert case.draft_family in ("sparse", "one_hot"), case
    assert case == _recipe(draft_family=case.draft_family, **fields), case


def test_verify_shrinks():
    assert minimal(verify.verify_cases()) == _recipe()
    _plain_but(minimal(verify.verify_cases(), lambda c: c.bs >= 3), bs=3)
    _plain_but(minimal(verify.verify_cases(), lambda c: c.vocab >= 10 and c.gamma >= 3), gamma=3, vocab=10)
    _plain_but(minimal(verify.verify_cases(), lambda c: c.verify_lens is not None and 1 in c.verify_lens), bs=1,
               verify_lens=(1,))
    _plain_but(minimal(verify.verify_cases(), lambda c: c.top_k > 0), temperature=0.7, top_k=3)
    _plain_but(minimal(verify.verify_cases(), lambda c: c.top_p < 1), temperature=1.2, top_p=0.8)
    _plain_but(minimal(verify.verify_cases(), lambda c: c.dtype == "float32" and c.bs >= 1), bs=1, dtype="float32")
    # The mask comes from one drawn seed (cheaper than a list per row), so a mixed mask keeps a row or so extra.
    mixed = minimal(verify.verify_cases(), lambda c: c.greedy is not None and any(c.greedy) and not all(c.greedy))
    assert (mixed.gamma, mixed.vocab, mixed.verify_lens) == (1, 2, None) and mixed.bs <= 3
    assert minimal(verify.verify_cases(min_bs=1, max_bs=3)).bs == 1  # the bounds hold while shrinking


def test_value_cases_shrink():
    assert minimal(verify.value_cases()) == ValueCase(2, 1, (), (), (), ())
    # A logit of 3: one row, one position, the 3 first, everything else 0, the draft all on token 0.
    assert minimal(verify.value_cases(), lambda c: any(3 in row for rows in c.logits for row in rows)) == \
        ValueCase(2, 1, ((0, 0),), (((3, 0), (0, 0)),), (((8, 0),),), ((0,),))
    assert minimal(verify.value_cases(), lambda c: c.bs >= 2) == \
        ValueCase(2, 1, ((0, 0),) * 2, (((0, 0), (0, 0)),) * 2, (((8, 0),),) * 2, ((0,),) * 2)
    last = minimal(verify.value_cases(), lambda c: c.vocab >= 4 and any(c.vocab - 1 in cand for cand in c.candidates))
    assert (last.vocab, last.gamma, last.candidates) == (4, 1, ((3, 0),))


def test_dyadic_and_markov_shrink():
    two = minimal(verify.dyadic_cases(), lambda c: c.bs >= 2)
    assert two == DyadicCase(2, 1, ((0, 0),) * 2, (((8, 0), (8, 0)),) * 2, (((8, 0),),) * 2, ((0,),) * 2, None, two.dtype)
    assert minimal(verify.markov_cases()) == MarkovCase(1, 2, 1, "sparse", "sparse", 0, None)
    assert minimal(verify.markov_cases(), lambda c: c.bs >= 3 and c.gamma >= 2) == MarkovCase(3, 2, 2, "sparse", "sparse", 0)


# ---- engine (planner and step level) --------------------------------------------------------------------------------


def _cells(c) -> int:
    return len(c.confidence) * len(c.confidence[0])


REACH["engine.confidences"] = (engine.confidences(), {
    "bs 6": lambda x: len(x) == 6,
    "gamma 6": lambda x: len(x[0]) == 6,
    "0 and 1 in a row": lambda x: any(0.0 in r and 1.0 in r for r in x),
    "ties": lambda x: any(len(set(r)) < len(r) for r in x),
})

REACH["engine.schedule_cases"] = (engine.schedule_cases(), {
    "budget 0": lambda c: c.budget == 0 and _cells(c) > 1,
    "budget full": lambda c: c.budget == _cells(c) > 1,
    "budget past full": lambda c: c.budget > _cells(c),
    **{f"min_verify_len {n}": (lambda c, n=n: c.min_verify_len == n) for n in (0, 1, 2)},
})

REACH["engine.sps_specs"] = (engine.sps_specs(), {
    "steps at the largest probe": lambda s: s.kind == "steps" and 64 in s.probes,
    "additive": lambda s: s.kind == "additive" and len(s.alpha_points) > 1,
})

REACH["engine.budget_cases"] = (engine.budget_cases(), {
    "forced fraction 1": lambda c: c.force_budget_frac == 1.0,
    "a small forced fraction": lambda c: c.force_budget_frac is not None and c.force_budget_frac < 0.25,
    "no table, no forced fraction": lambda c: c.sps is None and c.force_budget_frac is None,
    "a profiled table": lambda c: c.sps is not None,
})

REACH["engine.budget_cases(flat)"] = (engine.budget_cases(flat=True), {
    "a flat table": lambda c: c.sps is not None and len(set(c.sps.values)) == 1,
    "no table": lambda c: c.sps is None,
})

REACH["engine.plan_cases"] = (engine.plan_cases(), {
    **{f"mode {m}": (lambda c, m=m: c.verify_mode == m) for m in ("cap-accept", "compact", "static")},
    "no graphs": lambda c: c.capture_bs is None,
    "graphs": lambda c: c.capture_bs is not None,
    "a forced fraction below 1": lambda c: c.force_budget_frac is not None and c.force_budget_frac < 1,
    "bs 6": lambda c: len(c.confidence) == 6,
})

REACH["engine.layout_cases"] = (engine.layout_cases(), {
    "no rows": lambda c: c.verify_lens == (),
    "8 rows": lambda c: len(c.verify_lens) == 8,
    "a row verifying 1": lambda c: 1 in c.verify_lens,
    "gamma 7 verifying all 8": lambda c: c.gamma == 7 and 8 in c.verify_lens,
    "padding rows": lambda c: c.padded_bs > len(c.verify_lens) > 0,
})

REACH["engine.engine_specs"] = (engine.engine_specs(), {
    "gamma 1": lambda s: s.gamma == 1,
    "gamma 8": lambda s: s.gamma == 8,
    "vocab 5": lambda s: s.vocab_size == 5,
    "vocab 8": lambda s: s.vocab_size == 8,
    "overlap": lambda s: s.enable_overlap,
    "graphs": lambda s: s.capture_bs is not None,
    "min_verify_len 0": lambda s: s.min_verify_len == 0,
    "forced fraction 1": lambda s: s.force_budget_frac == 1.0,
    **{f"drafter {d}": (lambda s, d=d: s.drafter == d) for d in engine.DRAFTERS},
    **{f"mode {m}": (lambda s, m=m: s.verify_mode == m) for m in ("static", "cap-accept", "compact")},
})

REACH["engine.request_specs"] = (engine.request_specs(0, 8), {
    "temperature 0": lambda r: r.temperature == 0,
    "sampled": lambda r: r.temperature > 0 and r.top_k != 1,
    "top-k 1": lambda r: r.top_k == 1,
    "sampled under top-k": lambda r: r.top_k > 1 and r.temperature > 0,
    "EOS": lambda r: r.eos_id is not None,
    "max_new_tokens 1": lambda r: r.max_new_tokens == 1,
    "max_new_tokens 10": lambda r: r.max_new_tokens == 10,
    "prompt of 1": lambda r: len(r.prompt) == 1,
    "prompt of 5": lambda r: len(r.prompt) == 5,
    "the last token": lambda r: 7 in r.prompt,
})

REACH["engine.loop_cases"] = (engine.loop_cases(), {
    "3 requests": lambda c: len(c.requests) == 3,
    "greedy and sampled requests": lambda c: len({r.temperature == 0 or r.top_k == 1 for r in c.requests}) == 2,
})

REACH["engine.law_cases"] = (engine.law_cases(), {
    "top-p": lambda c: any(r.top_p < 1 for r in c.requests),
    "top-k": lambda c: any(r.top_k > 0 for r in c.requests),
    "temperature below 1": lambda c: any(r.temperature < 1 for r in c.requests),
    "3 requests": lambda c: len(c.requests) == 3,
})


def test_requests_keep_what_they_promise():
    @settings(database=None, derandomize=True, max_examples=50)
    @given(engine.request_specs(3, 5), engine.request_specs(0, 5, greedy=True), engine.request_specs(0, 5, greedy=False),
           engine.law_cases())
    def promised(r, greedy, sampled, law):
        assert r.rid == 3 and 1 <= len(r.prompt) <= 5 and all(0 <= t < 5 for t in r.prompt) and 1 <= r.max_new_tokens <= 10
        assert r.eos_id is None or 0 <= r.eos_id < 5
        assert greedy.temperature == 0 or greedy.top_k == 1
        assert sampled.temperature > 0 and sampled.top_k != 1
        assert all(q.temperature > 0 and q.top_k != 1 for q in law.requests)

    promised()


def test_machine_specs_cover_every_configuration_simplest_first():
    specs = engine.MACHINE_SPECS
    assert {(s.drafter, s.verify_mode, s.enable_overlap) for s in specs} == \
        {(d, m, o) for d in engine.DRAFTERS for m in ("static", "cap-accept", "compact") for o in (False, True)}
    assert {s.gamma for s in specs} == set(range(1, 9)) and {s.vocab_size for s in specs} == {5, 8}
    assert {s.force_budget_frac for s in specs} == {None, 0.25, 0.5, 1.0}
    assert {s.capture_bs for s in specs} == {None, (1, 2, 4, 8)} and {s.min_verify_len for s in specs} == {0, 1}
    first = specs[0]  # where `sampled_from(MACHINE_SPECS)` shrinks to
    assert (first.drafter, first.verify_mode, first.enable_overlap, first.gamma, first.vocab_size) == \
        ("vanilla", "static", False, 1, 5)
    assert (first.force_budget_frac, first.sps, first.capture_bs, first.min_verify_len) == (None, None, None, 1)


PLAIN_SPEC = EngineSpec(vocab_size=5, gamma=1, drafter="vanilla", verify_mode="static", sample_from_anchor=False)
PLAIN_REQUEST = RequestSpec(0, (0,), 0.0, 1, None, 0, 1.0)


def test_engine_shrinks():
    assert minimal(engine.confidences()) == ((0.0,),)
    assert minimal(engine.confidences(), lambda x: len(x) >= 3) == ((0.0,),) * 3
    assert minimal(engine.schedule_cases()) == ScheduleCase(((0.0,),), 0, 1)
    assert minimal(engine.schedule_cases(), lambda c: c.budget >= 2) == ScheduleCase(((0.0,),), 2, 1)
    assert minimal(engine.schedule_cases(), lambda c: len(c.confidence) >= 2 and c.min_verify_len == 0) == \
        ScheduleCase(((0.0,), (0.0,)), 0, 0)
    assert minimal(engine.layout_cases(), lambda c: len(c.verify_lens) >= 2) == LayoutCase((1, 1), 1, 0, 2)
    assert minimal(engine.layout_cases(), lambda c: c.gamma >= 3 and c.gamma + 1 in c.verify_lens) == LayoutCase((4,), 3, 0, 1)
    assert minimal(engine.layout_cases(), lambda c: c.padded_bs > len(c.verify_lens)) == LayoutCase((), 1, 0, 1)
    assert minimal(engine.engine_specs()) == PLAIN_SPEC
    assert minimal(engine.engine_specs(), lambda s: s.gamma >= 4 and s.enable_overlap) == \
        EngineSpec(vocab_size=5, gamma=4, drafter="vanilla", verify_mode="static", sample_from_anchor=False,
                   enable_overlap=True)


def test_requests_shrink():
    assert minimal(engine.request_specs(0, 5)) == PLAIN_REQUEST
    assert minimal(engine.request_specs(0, 5), lambda r: r.temperature > 0) == RequestSpec(0, (0,), 1.0, 1, None, 0, 1.0)
    assert minimal(engine.request_specs(0, 5), lambda r: len(r.prompt) >= 3) == RequestSpec(0, (0, 0, 0), 0.0, 1, None, 0, 1.0)
    assert minimal(engine.request_specs(0, 5), lambda r: r.eos_id is not None) == RequestSpec(0, (0,), 0.0, 1, 0, 0, 1.0)
    two = minimal(engine.loop_cases(), lambda c: len(c.requests) >= 2)
    assert two.spec == PLAIN_SPEC and two.requests == (PLAIN_REQUEST, RequestSpec(1, (0,), 0.0, 1, None, 0, 1.0))
    sampled = minimal(engine.loop_cases(), lambda c: any(r.temperature > 0 for r in c.requests))
    assert sampled.spec == PLAIN_SPEC and sampled.requests == (RequestSpec(0, (0,), 1.0, 1, None, 0, 1.0),)


# ---- dp -------------------------------------------------------------------------------------------------------------


def _past(c, size) -> bool:
    return any(t > size for step in c.steps for t in step)


REACH["dp.dp_sync_cases"] = (dp.dp_sync_cases(), {
    "bs 0": lambda c: c.bs == 0,
    "bs 64": lambda c: c.bs == 64,
    "gamma 1": lambda c: c.gamma == 1,
    "gamma 16": lambda c: c.gamma == 16,
    "1 rank": lambda c: c.rank_counts is not None and len(c.rank_counts) == 1,
    "16 ranks": lambda c: c.rank_counts is not None and len(c.rank_counts) == 16,
    "an idle rank": lambda c: _idle_and_busy(c.rank_counts),
    "the local rank idle": lambda c: c.bs == 0 and _idle_and_busy(c.rank_counts),
    "512 on a rank": lambda c: c.rank_counts is not None and 512 in c.rank_counts,
    "no counts": lambda c: c.rank_counts is None,
    "logprob counts of their own": lambda c: c.rank_counts is not None and c.rank_logprob_counts != c.rank_counts,
    "coordinated, anchor row sampling": lambda c: c.prefill_coordination_applied and c.sample_from_anchor,
})

# The largest world and batch are met late (the integer draws rarely take their upper bounds): a larger budget.
BUDGET["dp.dp_sync_cases"] = 2000

REACH["dp.scaling_cases"] = (dp.scaling_cases(), {
    "1 rank": lambda c: len(c.counts) == 1,
    "16 ranks": lambda c: len(c.counts) == 16,
    "idle ranks": lambda c: _idle_and_busy(c.counts) and _idle_and_busy(c.other_counts),
    "width 1": lambda c: c.width == 1,
    "width 16": lambda c: c.width == 16 or c.logprob_width == 16,
})

REACH["dp.local_tokens_cases"] = (dp.local_tokens_cases(), {
    "width 0": lambda c: c.rank_width == 0,
    "tp 8": lambda c: c.attn_tp_size == 8 and c.rank_width > 0,
    "a full rank": lambda c: c.global_count == c.rank_width > 0,
    "an empty rank": lambda c: c.global_count == 0 < c.rank_width,
    "a count tp does not divide": lambda c: c.global_count % c.attn_tp_size != 0,
})

REACH["dp.dp_padding_cases"] = (dp.dp_padding_cases(), {
    "2 ranks": lambda c: len(c.steps[0]) == 2,
    "4 ranks": lambda c: len(c.steps[0]) == 4,
    "6 steps": lambda c: len(c.steps) == 6,
    "an idle rank": lambda c: any(_idle_and_busy(step) for step in c.steps),
    "an all-idle step among others": lambda c: len(c.steps) > 1 and any(not any(step) for step in c.steps),
    "no graphs": lambda c: c.graph_sizes == () and _past(c, 0),
    "every graph size": lambda c: c.graph_sizes == dp.GRAPH_SIZES,
    "graph and eager ranks in a step": lambda c: bool(c.graph_sizes) and any(
        any(0 < t <= max(c.graph_sizes) for t in step) and any(t > max(c.graph_sizes) for t in step) for step in c.steps),
    "600 tokens": lambda c: any(600 in step for step in c.steps),
    "2 microbatches at the lowest threshold": lambda c: c.microbatches == 2 and c.microbatch_threshold == 2,
    "draft tokens 0": lambda c: c.draft_tokens == 0,
    "draft tokens 4": lambda c: c.draft_tokens == 4,
})


def test_dp_cases_keep_what_they_promise():
    @settings(database=None, derandomize=True, max_examples=50)
    @given(dp.dp_sync_cases(counts_present=True), dp.local_tokens_cases())
    def promised(c, local):
        width = c.gamma if c.sample_from_anchor else c.gamma + 1
        assert (c.bs * width if c.prefill_coordination_applied else c.bs) in c.rank_counts  # the local entry
        assert 1 <= len(c.rank_counts) <= 16 and len(c.rank_logprob_counts) == len(c.rank_counts)
        assert local.rank_width % local.attn_tp_size == 0 and 0 <= local.global_count <= local.rank_width

    promised()


def test_dp_shrinks():
    assert minimal(dp.dp_sync_cases()) == DpSyncCase(
        bs=0, gamma=1, sample_from_anchor=False, rank_counts=None, rank_logprob_counts=None, moe_dp_sync=False,
        prefill_coordination_applied=False, device_non_padded_count=False, graph_replay_allowed=False, extend_in_batch=False)
    # One idle rank: two ranks, one request on the other. The shrinker cannot lower bs without raising another rank's
    # count, so the local rank is either the busy one (bs 1) or the idle one (bs 0).
    idle = minimal(dp.dp_sync_cases(), lambda c: _idle_and_busy(c.rank_counts))
    assert sorted(idle.rank_counts) == [0, 1] and idle.bs <= 1 and idle.gamma == 1
    three = minimal(dp.dp_sync_cases(counts_present=True, moe_dp_sync=True, coordination=True), lambda c: c.bs >= 3)
    assert (three.bs, three.gamma, three.sample_from_anchor, three.rank_counts) == (3, 1, False, (6,))  # bs * (gamma + 1)
    assert minimal(dp.scaling_cases()) == ScalingCase((0,), (0,), 1, 1)
    assert minimal(dp.scaling_cases(), lambda c: len(c.counts) >= 2 and any(c.counts)) == ScalingCase((0, 1), (0, 0), 1, 1)
    assert minimal(dp.local_tokens_cases()) == LocalTokensCase(0, 0, 1)
    assert minimal(dp.local_tokens_cases(), lambda c: c.global_count % c.attn_tp_size) == LocalTokensCase(1, 2, 2)
    assert minimal(dp.local_tokens_cases(), lambda c: c.attn_tp_size >= 3 and c.global_count == c.rank_width > 0) == \
        LocalTokensCase(3, 3, 3)


def test_dp_padding_shrinks():
    plain = dict(graph_sizes=(), microbatches=1, microbatch_threshold=2, draft_tokens=0)
    assert minimal(dp.dp_padding_cases()) == DpPaddingCase(steps=((0, 0),), **plain)
    assert minimal(dp.dp_padding_cases(), lambda c: any(_idle_and_busy(step) for step in c.steps)) == \
        DpPaddingCase(steps=((0, 1),), **plain)
    assert minimal(dp.dp_padding_cases(), lambda c: len(c.steps) >= 3) == DpPaddingCase(steps=((0, 0),) * 3, **plain)
    assert minimal(dp.dp_padding_cases(), lambda c: len(c.steps[0]) >= 3) == DpPaddingCase(steps=((0, 0, 0),), **plain)
    assert minimal(dp.dp_padding_cases(), lambda c: bool(c.graph_sizes) and _past(c, max(c.graph_sizes))) == \
        DpPaddingCase(steps=((0, 2),), **{**plain, "graph_sizes": (1,)})
    assert minimal(dp.dp_padding_cases(), lambda c: c.microbatches == 2 and _past(c, 4)) == \
        DpPaddingCase(steps=((0, 5),), **{**plain, "microbatches": 2})


# ---- ranks (the fixed scenarios, and the drawn ones for callers that want more) -------------------------------------


@pytest.mark.parametrize("scenario", ranks.SCENARIOS, ids=lambda s: s.name)
def test_rank_scenarios_have_their_edges(scenario):
    """What the module docstring says each fixed scenario has: an idle rank, an all-idle step, a rank without a
    verify budget, a step where scaled counts pick another graph bucket than request counts."""
    sizes, budgets, q, buckets = scenario.batch_sizes, scenario.verify_budgets, scenario.draft_width, scenario.capture_bs
    assert any(_idle_and_busy(step) for step in sizes)
    assert any(not any(step) for step in sizes)
    assert any(b is None for step in budgets for b in step)
    assert any(oracle.smallest_size(buckets, max(step)) != oracle.smallest_size(buckets, max(step) * q) for step in sizes)


def _budget_at(c, edge) -> bool:
    return any(b == edge(bs) and bs > 0 for bb, ss in zip(c.verify_budgets, c.batch_sizes) for b, bs in zip(bb, ss))


REACH["ranks.small_rank_scenarios"] = (ranks.small_rank_scenarios(), {
    "world 1": lambda c: c.world_size == 1,
    "world 4": lambda c: c.world_size == 4,
    "an idle rank": lambda c: any(_idle_and_busy(step) for step in c.batch_sizes),
    "an all-idle step": lambda c: c.world_size > 1 and any(not any(step) for step in c.batch_sizes),
    "no budget": lambda c: any(b is None for step in c.verify_budgets for b in step),
    "budget 0": lambda c: _budget_at(c, lambda bs: 0),
    "budget full": lambda c: _budget_at(c, lambda bs: bs * c.gamma),
    "bs 6": lambda c: any(6 in step for step in c.batch_sizes),
    "4 steps": lambda c: len(c.batch_sizes) == 4,
})


def test_drawn_rank_scenarios_shrink():
    idle = minimal(ranks.small_rank_scenarios(), lambda c: any(_idle_and_busy(step) for step in c.batch_sizes))
    assert (idle.world_size, idle.batch_sizes, idle.gamma) == (2, ((0, 1),), 1)


# ---- kv -------------------------------------------------------------------------------------------------------------


KV_BOUND = st.tuples(kv.kv_plans(), st.integers(0, 700), st.sampled_from((1, 16, 64)))  # (plan, admission limit, page)


def _bound(t):
    plan, limit, page = t
    return kv.bind(plan, limit, page)


def _full_request(t) -> bool:
    case = _bound(t)
    return case is not None and any(r.prompt_len + r.max_new_tokens == t[1] for r in case.requests)


REACH["kv.kv_plans"] = (kv.kv_plans(), {
    "gamma 1": lambda p: p.gamma == 1,
    "gamma 15": lambda p: p.gamma == 15,
    "4 requests": lambda p: len(p.requests) == 4,
    "4 steps": lambda p: len(p.commits) == 4,
    "commits 1 and T in a step": lambda p: p.gamma > 1 and any(1 in s and p.gamma + 1 in s for s in p.commits),
    "a request at the limit": lambda p: any(at for at, _, _ in p.requests),
    "context 48": lambda p: p.context_len == 48,
    "the last page choice": lambda p: p.page_choice == 7,
})

REACH["kv.bind"] = (KV_BOUND, {
    "page size 1, a request at the limit": lambda t: t[2] == 1 and _full_request(t),
    "nothing fits": lambda t: _bound(t) is None,
    "commits cut to 1 to fit": lambda t: _bound(t) is not None and _bound(t).commits != t[0].commits,
})


def test_bind_keeps_its_promise():
    """Requests within the limit (at it when asked), still decoding at every reservation; None when nothing fits."""

    @settings(database=None, derandomize=True, max_examples=100)
    @given(KV_BOUND)
    def bound(t):
        plan, limit, page = t
        case = kv.bind(plan, limit, page)
        steps = len(plan.commits)
        assert (case is None) == (limit < steps + 2)
        if case is None:
            return
        assert case.page_size == page and case.gamma == plan.gamma
        for i, (req, (at_limit, _, _)) in enumerate(zip(case.requests, plan.requests)):
            assert req.prompt_len >= 1 and req.prompt_len + req.max_new_tokens <= limit
            assert not at_limit or req.prompt_len + req.max_new_tokens == limit
            assert 1 + sum(case.commits[s][i] for s in range(steps - 1)) < req.max_new_tokens  # at the last reservation
            assert all(1 <= case.commits[s][i] <= plan.gamma + 1 for s in range(steps))

    bound()


def test_kv_shrinks():
    one = ((False, 0.0, 0),)
    assert minimal(kv.kv_plans()) == kv.KvPlan(1, 0, 48, one, ((1,),))
    assert minimal(kv.kv_plans(), lambda p: len(p.requests) >= 2) == kv.KvPlan(1, 0, 48, one * 2, ((1, 1),))
    assert minimal(kv.kv_plans(), lambda p: any(at for at, _, _ in p.requests)) == kv.KvPlan(1, 0, 48, ((True, 0.0, 0),), ((1,),))
    # A full commit keeps full while gamma shrinks.
    assert minimal(kv.kv_plans(), lambda p: p.gamma >= 3 and any(p.gamma + 1 in s for s in p.commits)) == \
        kv.KvPlan(3, 0, 48, one, ((4,),))
    assert minimal(kv.kv_plans(), lambda p: len(p.commits) >= 2 and p.context_len > 100) == \
        kv.KvPlan(1, 0, 101, one, ((1,), (1,)))


# ---- handoff --------------------------------------------------------------------------------------------------------


def _bs(c) -> int:
    return len(c.prompt_lens)


REACH["handoff.handoff_cases"] = (handoff.handoff_cases(), {
    "bs 0 (DP idle)": lambda c: _bs(c) == 0,
    "bs 1": lambda c: _bs(c) == 1,
    "bs 64": lambda c: _bs(c) == 64,
    "a full pool": lambda c: c.pool_size == _bs(c) > 1,
    "rows out of order": lambda c: list(c.req_pool_indices) != sorted(c.req_pool_indices),
    "requests carrying outputs": lambda c: any(n > 1 for n in c.output_lens),
    "dflash": lambda c: c.algorithm == "dflash",
    "the largest token": lambda c: handoff.MAX_TOKEN in c.bonus_tokens,
    "prompt 1": lambda c: 1 in c.prompt_lens,
    "prompt 4096": lambda c: 4096 in c.prompt_lens,
    "gamma 1": lambda c: c.gamma == 1 and _bs(c) > 0,
    "gamma 16": lambda c: c.gamma == 16,
    "overlap": lambda c: c.enable_overlap and _bs(c) > 0,
})

REACH["handoff.handoff_cases(min_bs=1)"] = (handoff.handoff_cases(min_bs=1), {
    "bs 1": lambda c: _bs(c) == 1,
    "bs 64": lambda c: _bs(c) == 64,
})


def test_handoff_rows_are_distinct_rows_of_the_pool():
    @settings(database=None, derandomize=True, max_examples=50)
    @given(handoff.handoff_cases(), handoff.handoff_cases(min_bs=1, overlap=True), handoff.handoff_cases(max_bs=0))
    def rows(c, d, idle):
        for case in (c, d):
            assert len(set(case.req_pool_indices)) == _bs(case) and all(0 <= r < case.pool_size for r in case.req_pool_indices)
            assert len(case.bonus_tokens) == _bs(case) and all(0 <= t <= handoff.MAX_TOKEN for t in case.bonus_tokens)
        assert _bs(d) >= 1 and d.enable_overlap and _bs(idle) == 0

    rows()


def _handoff(prompt_lens, rows, bonus, *, pool_size, enable_overlap=False) -> HandoffCase:
    return HandoffCase(prompt_lens=prompt_lens, req_pool_indices=rows, bonus_tokens=bonus, enable_overlap=enable_overlap,
                       pool_size=pool_size, gamma=1, algorithm="dspark", output_lens=())


def test_handoff_shrinks():
    assert minimal(handoff.handoff_cases()) == _handoff((), (), (), pool_size=1)
    three = minimal(handoff.handoff_cases(), lambda c: _bs(c) >= 3)
    # The pool rows come from one seed (0 here): some order of 0..2, not necessarily sorted.
    assert three == _handoff((1, 1, 1), three.req_pool_indices, (0, 0, 0), pool_size=3)
    assert sorted(three.req_pool_indices) == [0, 1, 2]
    big = minimal(handoff.handoff_cases(), lambda c: any(t >= 1000 for t in c.bonus_tokens))
    assert big.prompt_lens == (1,) and big.bonus_tokens == (1000,)
    assert minimal(handoff.handoff_cases(min_bs=1, overlap=True)) == _handoff((1,), (0,), (0,), pool_size=1, enable_overlap=True)


# ---- graph ----------------------------------------------------------------------------------------------------------


def _width(c) -> int:
    return c.gamma + 1 if c.runner == "target" else (c.gamma if c.sample_from_anchor else c.gamma + 1)


REACH["graph.graph_cases"] = (graph.graph_cases(), {
    "the default sizes": lambda c: c.capture_bs == graph.DEFAULT_CAPTURE_BS,
    "drawn sizes": lambda c: c.capture_bs != graph.DEFAULT_CAPTURE_BS,
    "a pool that clips the sizes": lambda c: c.max_running_requests < max(c.capture_bs),
    "past the largest graph": lambda c: c.local_bs > max(c.capture_bs),
    "past the pool": lambda c: c.local_bs > c.max_running_requests,
    "at a captured size": lambda c: c.local_bs in c.capture_bs,
    "just below a captured size, not captured": lambda c: c.local_bs + 1 in c.capture_bs and c.local_bs not in c.capture_bs,
    "just past a captured size, not captured": lambda c: c.local_bs - 1 in c.capture_bs and c.local_bs not in c.capture_bs,
    "one past the largest size": lambda c: c.local_bs == max(c.capture_bs) + 1,
    "one past the pool": lambda c: c.local_bs == c.max_running_requests + 1,
    "past the largest default size": lambda c: c.capture_bs == graph.DEFAULT_CAPTURE_BS and c.local_bs > 64,
    "between captured sizes": lambda c: c.local_bs not in c.capture_bs and 0 < c.local_bs < max(c.capture_bs),
    "bs 0": lambda c: c.local_bs == 0,
    "gamma 1": lambda c: c.gamma == 1,
    "gamma 8": lambda c: c.gamma == 8,
    "the draft runner, anchor row sampling": lambda c: c.runner == "draft" and c.sample_from_anchor,
    "a wider batch": lambda c: c.batch_width == _width(c) + 1,
    "a narrower batch": lambda c: c.batch_width == _width(c) - 1,
    "5 DP ranks": lambda c: c.rank_counts is not None and len(c.rank_counts) == 5,
    "the local DP rank idle": lambda c: c.rank_counts is not None and c.local_bs == 0 and any(c.rank_counts),
    "a larger peer": lambda c: c.rank_counts is not None and max(c.rank_counts) > c.local_bs,
    "vote and MoE draft": lambda c: c.can_run_vote and c.draft_is_moe,
})


def test_graph_cases_are_drawn_around_the_engines_own_sizes():
    sizes = (3, 5, 9)  # an engine whose defaults are not SGLang's
    seen = set()

    @settings(database=None, derandomize=True, max_examples=300)
    @given(graph.graph_cases(sizes))
    def draws(c):
        if c.capture_bs == sizes:
            seen.add(c.local_bs)

    draws()
    assert {2, 3, 4, 5, 6, 8, 9, 10} <= seen, sorted(seen)


def test_graph_shrinks():
    first = minimal(graph.graph_cases())
    assert (first.capture_bs, first.max_running_requests, first.gamma, first.runner, first.local_bs, first.rank_counts) == \
        (graph.DEFAULT_CAPTURE_BS, 1, 1, "target", 0, None)
    past = minimal(graph.graph_cases(), lambda c: c.local_bs > max(c.capture_bs))
    assert (past.capture_bs, past.max_running_requests, past.gamma, past.local_bs, past.rank_counts) == ((1,), 1, 1, 2, None)
    pool = minimal(graph.graph_cases(), lambda c: c.max_running_requests >= 10 and c.local_bs > c.max_running_requests)
    assert (pool.max_running_requests, pool.local_bs, pool.gamma, pool.rank_counts) == (10, 11, 1, None)
    dp3 = minimal(graph.graph_cases(), lambda c: c.rank_counts is not None and len(c.rank_counts) >= 3)
    assert dp3.rank_counts == (0, 0, 0) and dp3.local_bs == 0


# ---- relay ----------------------------------------------------------------------------------------------------------


def _row_reused(c) -> bool:
    """A request leaves and another joins at the same step: the newcomer takes a row whose history is in flight."""
    return any(s.leave and s.join for s in c.steps)


REACH["relay.relay_cases"] = (relay.relay_cases(), {
    "pool 1, several steps": lambda c: c.pool_size == 1 and len(c.steps) > 1,
    "pool 4 filled at once": lambda c: c.pool_size == 4 and any(len(s.join) == 4 for s in c.steps),
    "8 steps": lambda c: len(c.steps) == 8,
    "gamma 4": lambda c: c.gamma == 4,
    "overlap": lambda c: c.overlap,
    "a row reused": _row_reused,
    "two leave and one joins": lambda c: any(len(s.leave) > 1 and s.join for s in c.steps),
})


def test_relay_programs_keep_the_pool():
    @settings(database=None, derandomize=True, max_examples=50)
    @given(relay.relay_cases())
    def pool(c):
        live = set()
        for s in c.steps:
            assert set(s.leave) <= live
            live = (live - set(s.leave)) | set(s.join)
            assert 1 <= len(live) <= c.pool_size  # never empty, never past the pool

    pool()


def test_relay_shrinks():
    assert minimal(relay.relay_cases()) == RelayCase(pool_size=1, gamma=1, overlap=False, steps=(RelayStep((), (0,)),))
    assert minimal(relay.relay_cases(), _row_reused) == \
        RelayCase(pool_size=1, gamma=1, overlap=False, steps=(RelayStep((), (0,)), RelayStep((0,), (1,))))
    assert minimal(relay.relay_cases(), lambda c: c.pool_size >= 3 and any(len(s.join) == c.pool_size for s in c.steps)) == \
        RelayCase(pool_size=3, gamma=1, overlap=False, steps=(RelayStep((), (0, 1, 2)),))


def _early(c) -> dict:
    """rid -> steps its row was taken before it joined."""
    joins = {r: s for s, st in enumerate(c.steps) for r in st.join}
    return {r: joins[r] - t for r, t in c.taken().items() if joins[r] > t}


def _reads_early(c, lag=2) -> bool:
    """A pre-allocated request is read while its row was already its own `lag` steps back (RELAY-002's read)."""
    joins = {r: s for s, st in enumerate(c.steps) for r in st.join}
    return any(t <= s - lag < joins[r] <= s for r, t in c.taken().items() for s in range(len(c.steps)))


REACH["relay.prealloc_relay_cases"] = (relay.prealloc_relay_cases(), {
    "a row taken 1 step early": lambda c: 1 in _early(c).values(),
    "a row taken 3 steps early": lambda c: 3 in _early(c).values(),
    "a freed row taken early": lambda c: any(s.leave and s.prealloc for s in c.steps),
    "a pre-allocated request read before its history": _reads_early,
    "every row taken at its join": lambda c: not _early(c),
    "pool full with a pre-allocation": lambda c: any(
        len(b) + sum(1 for r, t in c.taken().items() if t <= i < next(j for j, st in enumerate(c.steps) if r in st.join))
        == c.pool_size and any(s.prealloc for s in c.steps) for i, b in enumerate(c.batches())),
})


def test_prealloc_relay_programs_keep_the_pool():
    @settings(database=None, derandomize=True, max_examples=100)
    @given(relay.prealloc_relay_cases())
    def pool(c):
        assert c.pd_decode and c.overlap
        joins = {r: s for s, step in enumerate(c.steps) for r in step.join}
        for s, b in enumerate(c.batches()):
            reserved = [r for r, t in c.taken().items() if t <= s < joins[r]]
            assert len(b) + len(reserved) <= c.pool_size  # live and pre-allocated rows fit the pool
        for s, step in enumerate(c.steps):
            assert all(joins[r] > s for r in step.prealloc)  # a pre-allocated request joins later

    pool()


def test_prealloc_relay_cases_shrink_to_one_early_row():
    assert minimal(relay.prealloc_relay_cases(), _reads_early) == RelayCase(
        pool_size=2, gamma=1, overlap=True, pd_decode=True,
        steps=(RelayStep((), (0,), (1,)), RelayStep((), (1,)), RelayStep()))


# ---- draft ----------------------------------------------------------------------------------------------------------


REACH["draft.draft_cases"] = (draft.draft_cases(), {
    "bs 1": lambda c: c.bs == 1,
    "bs 6": lambda c: c.bs == 6,
    "gamma 1": lambda c: c.gamma == 1,
    "gamma 7": lambda c: c.gamma == 7,
    "the anchor's width": lambda c: c.sample_from_anchor,
    "committed length 1": lambda c: 1 in c.prefix_lens,
    "committed length 200": lambda c: 200 in c.prefix_lens,
    "commits 1 and T": lambda c: c.gamma > 1 and {1, c.gamma + 1} <= set(c.commit_lens),
    "a partial commit at gamma 7": lambda c: c.gamma == 7 and any(1 < n < 8 for n in c.commit_lens),
    "the last anchor token": lambda c: 62 in c.bonus_tokens,
})


def test_draft_cases_keep_what_they_promise():
    @settings(database=None, derandomize=True, max_examples=50)
    @given(draft.draft_cases())
    def promised(c):
        assert 1 <= c.bs <= 6 and 1 <= c.gamma <= 7
        assert len(c.prefix_lens) == len(c.bonus_tokens) == len(c.commit_lens) == c.bs
        assert all(1 <= n <= c.gamma + 1 for n in c.commit_lens) and all(0 <= t < 64 for t in c.bonus_tokens)

    promised()
    assert [draft._commit_len(code, 4) for code in range(1, 9)] == [1, 2, 2, 3, 4, 4, 5, 5]  # every value, 1 and T


def test_draft_shrinks():
    assert minimal(draft.draft_cases()) == DraftCase(1, False, (1,), (0,), (1,), 0)
    # Whole requests are deleted: one failing request among several shrinks to that request alone.
    assert minimal(draft.draft_cases(), lambda c: c.bs >= 3) == DraftCase(1, False, (1,) * 3, (0,) * 3, (1,) * 3, 0)
    assert minimal(draft.draft_cases(), lambda c: any(n >= 100 for n in c.prefix_lens)) == DraftCase(1, False, (100,), (0,), (1,), 0)
    # A full commit keeps full while gamma shrinks.
    assert minimal(draft.draft_cases(), lambda c: c.gamma >= 3 and c.gamma + 1 in c.commit_lens) == \
        DraftCase(3, False, (1,), (0,), (4,), 0)
    # A partial commit: one request committing 2. (Its code is scaled to T, so the shrinker may stop at a gamma above
    # 2: a smaller gamma maps the same code to a commit of 1.)
    partial = minimal(draft.draft_cases(), lambda c: any(1 < n < c.gamma + 1 for n in c.commit_lens))
    assert partial == DraftCase(partial.gamma, False, (1,), (0,), (2,), 0) and partial.gamma <= 4


REACH["schedules.schedules"] = (schedules.schedules(max_actions=16, max_streams=2), {
    "eager (no stall)": lambda s: not s.stalls,
    "a side stream stalled, the default stream not": lambda s: any(t.streams and not t.default for t in s.stalls),
    "the default stream stalled": lambda s: any(t.default for t in s.stalls),
    "two side streams in one stall": lambda s: any(t.streams == 0b11 for t in s.stalls),
    "a stall of one host action": lambda s: any(t.length == 1 for t in s.stalls),
    "a stall past the last host action": lambda s: any(t.start + t.length > 16 for t in s.stalls),
    "a stall at the last host action": lambda s: any(t.start == 15 for t in s.stalls),
    "two stalls": lambda s: len(s.stalls) == 2,
})


REACH["schedules.stream_relay_cases"] = (schedules.stream_relay_cases(), {
    "the relay's copy stream stalled": lambda c: any(t.streams & 1 for t in c.schedule.stalls),
    "a stall long enough to span two relay steps (the lag)": lambda c: any(t.length >= 24 for t in c.schedule.stalls),
    "a row reused while a stall is on": lambda c: c.schedule.stalls and any(s.leave and s.join for s in c.relay.steps),
    "eager": lambda c: not c.schedule.stalls,
})


# ---- rank steps: an idle rank in every verify mode and step kind ----------------------------------------------------


def _idle_at(c, mode, kind) -> bool:
    return mode in c.verify_modes and any(k == kind and 0 in c.batch_sizes[s] for s, k in enumerate(c.kinds))


REACH["rank_steps.rank_steps_cases"] = (rank_steps.rank_steps_cases(), {
    **{f"an idle rank at a {kind} step in {mode}": (lambda c, m=mode, k=kind: _idle_at(c, m, k))
       for mode in VERIFY_MODES for kind in STEP_KINDS},
    "every verify mode in one case": lambda c: c.verify_modes == VERIFY_MODES,
    "world 3": lambda c: c.world_size == 3,
    "4 steps": lambda c: len(c.kinds) == 4,
    "an idle rank beside 3 requests": lambda c: any(0 in row and 3 in row for row in c.batch_sizes),
    "an idle rank beside a 6-token prompt": lambda c: any(6 in lens for step in c.prompt_lens for lens in step),
    "graphs that cover every rank": lambda c: c.capture_bs and max(map(max, c.batch_sizes)) <= max(c.capture_bs),
    "an idle rank beside a rank no captured size covers": lambda c: c.capture_bs and any(
        0 in row and max(row) > max(c.capture_bs) for row in c.batch_sizes),
    "no graphs": lambda c: not c.capture_bs,
    "a forced budget": lambda c: c.budget_frac is not None,
    "gamma 4, the anchor not sampled": lambda c: c.gamma == 4 and not c.sample_from_anchor,
})


def test_rank_steps_shrink_to_one_idle_rank_in_one_mode():
    smallest = minimal(rank_steps.rank_steps_cases(), lambda c: "compact" in c.verify_modes and "handoff" in c.kinds)
    assert smallest == RankStepsCase(world_size=2, verify_modes=("compact",), gamma=1, kinds=("handoff",),
                                     batch_sizes=((0, 1),), prompt_lens=(((), ()),), capture_bs=(), budget_frac=None,
                                     sample_from_anchor=False, seed=0)


# ---- the reach tests ------------------------------------------------------------------------------------------------


def _any_req(c, pred) -> bool:
    return any(pred(c.spec, r) for r in c.requests)


# Whole requests: every parameter family on and off, at the edges where speculation can differ from plain decoding.
REACH["request.request_loop_cases"] = (request.request_loop_cases(), {
    "min_new_tokens at gamma": lambda c: _any_req(c, lambda s, r: r.min_new_tokens == s.gamma),
    "min_new_tokens at gamma+1": lambda c: _any_req(c, lambda s, r: r.min_new_tokens == s.gamma + 1),
    "EOS pulled up under min_new_tokens": lambda c: _any_req(
        c, lambda s, r: r.min_new_tokens and any(t == r.eos_id and b > 0 for t, b in r.logit_bias)),
    "stop token pulled up": lambda c: _any_req(
        c, lambda s, r: r.stop_token_ids and any(t == r.stop_token_ids[0] and b > 0 for t, b in r.logit_bias)),
    "penalty at its bound 2": lambda c: _any_req(c, lambda s, r: 2.0 in (r.frequency_penalty, r.presence_penalty,
                                                                         r.repetition_penalty)),
    "negative penalty": lambda c: _any_req(c, lambda s, r: r.frequency_penalty < 0 or r.presence_penalty < 0),
    "min_p on a sampled request": lambda c: _any_req(c, lambda s, r: r.min_p > 0 and not r.greedy),
    "ignore_eos": lambda c: _any_req(c, lambda s, r: r.ignore_eos),
    "greedy and sampled in one batch": lambda c: len({r.greedy for r in c.requests}) == 2,
    "only some requests carry a parameter": lambda c: len(c.requests) > 1 and any(
        not request_oracle.parameters_used(r) for r in c.requests) and any(
        request_oracle.parameters_used(r) for r in c.requests),
    "oracle drafter": lambda c: c.spec.drafter == "oracle",
    "ragged mode": lambda c: c.spec.verify_mode != "static",
})
BUDGET["request.request_loop_cases"] = 2000


def _any_row(c, pred) -> bool:
    return any(pred(row, len(row.output), len(row.drafts)) for row in c.rows)


def _emitted(row) -> int:
    r = row.request
    return len(request_oracle.greedy_verify(r.prompt, row.output, row.drafts, row.logits, r))


# The verify batch of whole requests: min_new_tokens's edge at each place in the block, drafts the parameters reject.
REACH["request.request_verify_cases"] = (request.request_verify_cases(), {
    "min_new_tokens reached at the bonus": lambda c: _any_row(c, lambda r, o, n: n and r.request.min_new_tokens == o + n),
    "min_new_tokens reached inside the block": lambda c: _any_row(c, lambda r, o, n: o < r.request.min_new_tokens < o + n),
    "a masked stop token id": lambda c: _any_row(c, lambda r, o, n: r.request.min_new_tokens > o
                                                 and r.request.stop_token_ids),
    "every draft accepted, bonus after a repeated token": lambda c: _any_row(
        c, lambda r, o, n: n > 1 and _emitted(r) == n + 1 and len(set(r.drafts)) < n),
    "a raw-argmax draft the parameters reject": lambda c: _any_row(
        c, lambda r, o, n: n and _emitted(r) <= n and r.request.frequency_penalty > 0),
    "repetition penalty 0.25": lambda c: _any_row(c, lambda r, o, n: r.request.repetition_penalty == 0.25),
    "logit bias": lambda c: _any_row(c, lambda r, o, n: r.request.logit_bias),
    "a row with no draft": lambda c: _any_row(c, lambda r, o, n: n == 0),
    "ragged rows": lambda c: len({len(r.drafts) for r in c.rows}) > 1,
    "only some rows carry a parameter": lambda c: len({bool(request_oracle.parameters_used(r.request))
                                                       for r in c.rows}) == 2,
})


def _option_engine():
    from contracts.adapters.reference import ReferenceAdapter  # a pack with declared options: the strategy reads them

    return ReferenceAdapter()


REACH["options.option_cases"] = (options.option_cases(engine=_option_engine()), {
    "a passive option": lambda c: c.option == "decision_dump",
    "an output-preserving mode": lambda c: c.option == "enable_overlap",
    "a sampled request under a passive option": lambda c: c.option == "decision_dump" and _any_req(
        c.case, lambda s, r: not r.greedy),
    "a request with a whole-request parameter": lambda c: _any_req(c.case, lambda s, r: request_oracle.parameters_used(r)),
})


# After every REACH entry: the parametrize list is read once, here, so an entry added below it would never run.
@pytest.mark.parametrize("name", list(REACH))
def test_reaches_its_boundaries(name):
    strategy, boundaries = REACH[name]
    reaches(strategy, boundaries, BUDGET.get(name, REACH_EXAMPLES))


def test_every_strategy_module_is_covered():
    modules = {info.name for info in pkgutil.iter_modules(contracts.strategies.__path__)}
    assert modules == {name.split(".")[0] for name in REACH}

"""Idle DP ranks in every verify mode and step kind: the strategy's reach and shrinking, and `dspark.dp_steps`'s
rank program on real rank processes (started by `contracts.launcher`), idle ranks included."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings

from contracts.adapters.reference import ReferenceAdapter
from contracts.adapters.reference.rank_steps import step_config
from contracts.boundary.ranks import STEP_KINDS, VERIFY_KINDS, VERIFY_MODES, RankStepsCase
from contracts.launcher import launch
from contracts.registry import all_contracts
from contracts.runner import violation_of
from contracts.strategies.rank_steps import rank_steps_cases
from dspark import dp_steps
from dspark.dp_steps import StepRankProgram, StepRunConfig
from tests.property.mutants import rank_steps as step_mutants
from tests.property.rank_processes import no_orphans  # noqa: F401 - autouse fixture

MINIMAL = dict(world_size=2, gamma=1, batch_sizes=((0, 1),), prompt_lens=(((), ()),), capture_bs=(), budget_frac=None,
               sample_from_anchor=False, seed=0)


def _draws(strategy, n: int) -> list:
    out = []

    @settings(max_examples=n, derandomize=True, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def collect(case):
        out.append(case)

    collect()
    return out


def _idle_pairs(case: RankStepsCase) -> set:
    return {(m, case.kinds[s]) for m, s in case.schedule if 0 in case.batch_sizes[s]}


def test_every_verify_mode_and_step_kind_meets_an_idle_rank():
    """Drawn many times, the strategy puts an idle rank into every (verify mode, step kind) pair; every step of
    every case holds one, beside a busy rank unless no rank has work."""
    cases = _draws(rank_steps_cases(), 200)
    reached = set().union(*map(_idle_pairs, cases))
    assert reached == set(itertools.product(VERIFY_MODES, STEP_KINDS))
    for case in cases:
        for s, kind in enumerate(case.kinds):
            row = case.batch_sizes[s]
            assert 0 in row and (any(row) == (kind != "idle")), (case, s)
    assert sum(len(c.verify_modes) == len(VERIFY_MODES) for c in cases) > len(cases) // 4  # few cases reach all modes


def test_the_strategy_keeps_to_the_modes_and_kinds_declared():
    cases = _draws(rank_steps_cases(("compact",), ("prefill", "idle")), 40)
    assert {m for c in cases for m in c.verify_modes} == {"compact"}
    assert {k for c in cases for k in c.kinds} == {"prefill", "idle"}


@pytest.mark.parametrize("mode", VERIFY_MODES)
def test_an_idle_rank_case_shrinks_to_the_smallest(mode):
    """Any case with an idle rank at a verify step in one mode shrinks to 2 ranks, one decode step, rank 0 idle and
    rank 1 with one request, in that mode alone."""
    found = find(rank_steps_cases(),
                 lambda c: mode in c.verify_modes and any(c.kinds[s] in VERIFY_KINDS for s in range(len(c.kinds))),
                 settings=settings(database=None, derandomize=True, max_examples=200))
    assert found == RankStepsCase(verify_modes=(mode,), kinds=("decode",), **MINIMAL)


def test_a_ragged_idle_rank_bug_is_caught_with_the_smallest_case():
    """At the check's settings, on real ranks: the idle rank that keeps the verify padding in the ragged modes fails
    RANKS-010 on the smallest case, shrunk from a drawn one (no pinned case), in one ragged mode, naming the idle
    rank."""
    assert all_contracts()["RANKS-010"].examples == ()
    mutant = step_mutants.IdleRankKeepsVerifyPaddingWhenRagged
    with step_mutants.Mutant("m", ("RANKS-010",), lambda mp: mp.setattr(dp_steps, "StepRankProgram", mutant)).active():
        violation = violation_of(all_contracts()["RANKS-010"], ReferenceAdapter())
    assert violation.case == RankStepsCase(verify_modes=("cap-accept",), kinds=("decode",), **MINIMAL)
    assert violation.what.startswith("cap-accept: step 0 (decode) rank 0 (idle): verify_gathered"), violation.what


def test_a_pinned_case_outside_the_declared_modes_is_not_run():
    class StaticOnly(ReferenceAdapter):
        rank_verify_modes = ("static",)

        def run_rank_steps(self, case):
            assert case.verify_modes == ("static",), f"asked to run {case.verify_modes}"
            return super().run_rank_steps(case)

    from contracts.runner import run_contract

    run_contract(all_contracts()["RANKS-009"], StaticOnly(), profile="ci", max_examples=2)


def _run(cfg: StepRunConfig, program=StepRankProgram):
    return launch(program, cfg, cfg.world_size, steps=cfg.steps, timeout_s=20.0, backend="gloo").observations


def test_idle_ranks_through_every_kind_in_every_mode():
    case = RankStepsCase(world_size=3, verify_modes=VERIFY_MODES, gamma=2, kinds=STEP_KINDS,
                         batch_sizes=((2, 0, 1), (0, 3, 1), (1, 0, 0), (0, 0, 0)),
                         prompt_lens=(((3, 1), (), (4,)), ((), (), ()), ((), (), ()), ((), (), ())), capture_bs=(1, 2),
                         budget_frac=0.5)
    obs = _run(step_config(case))
    T, q = 3, 2
    for i, (mode, s) in enumerate(case.schedule):
        kind, row = case.kinds[s], case.batch_sizes[s]
        for r in range(3):
            o = obs[r][i]
            assert (o["verify_mode"], o["step"], o["kind"]) == (mode, s, kind)
            assert o["collectives"] == len(dp_steps.OPS)
            assert o["request_counts"] == list(row)
            tokens = [sum(p) for p in case.prompt_lens[s]] if kind == "prefill" else [n * q for n in row]
            assert o["forward_token_counts"] == tokens
            assert (o["forward_mode"] == "IDLE") == (row[r] == 0)
            if row[r] == 0 or kind not in VERIFY_KINDS:  # what the idle rank holds: nothing of its own
                assert (o["verify_lens"], o["verify_tokens"], o["verify_rows"], o["correct_len"]) == ([], 0, [], [])
            elif mode == "static":
                assert o["verify_lens"] == [T] * row[r]
            real = o["rank_verify_tokens"]
            assert all(obs[p][i]["rank_verify_tokens"] == real for p in range(3))
            assert len(o["verify_gathered"]) == sum(real)
            # Sizes 3 and 6 (capture 1, 2 x T): padded together to the smallest covering the largest, else not at all.
            size = next((n for n in (3, 6) if n >= max(real)), None)
            assert o["rank_padded_verify_tokens"] == ([size] * 3 if size else real)


def test_one_rank_alone_and_idle():
    cfg = StepRunConfig(world_size=1, verify_modes=("compact",), gamma=1, kinds=("idle", "decode"),
                        batch_sizes=((0,), (2,)), prompt_lens=(((),), ((),)))
    obs = _run(cfg)[0]
    assert [o["forward_mode"] for o in obs] == ["IDLE", "DRAFT_EXTEND"]
    assert obs[0]["verify_gathered"] == [] and len(obs[1]["verify_gathered"]) == obs[1]["verify_tokens"] > 0


@pytest.mark.parametrize("kwargs, field", [
    (dict(verify_modes=("ragged",)), "verify_modes"),
    (dict(verify_modes=()), "verify_modes"),
    (dict(verify_modes=("static", "static")), "verify_modes"),
    (dict(kinds=("warmup",)), "kinds"),
    (dict(batch_sizes=((1, 0), (0, 0))), "batch_sizes, prompt_lens"),
    (dict(kinds=("idle",), batch_sizes=((1, 0),)), r"batch_sizes\[0\]: an idle step"),
    (dict(batch_sizes=((1, -1),)), r"batch_sizes\[0\]"),
    (dict(prompt_lens=(((), ()),)), r"prompt_lens\[0\]\[0\]"),
    (dict(kinds=("decode",), prompt_lens=(((2,), ()),)), r"prompt_lens\[0\]\[0\]"),
    (dict(budget_frac=0.0), "force_budget_frac"),
])
def test_bad_config_names_the_field(kwargs, field):
    base = dict(world_size=2, verify_modes=("static",), gamma=2, kinds=("prefill",), batch_sizes=((1, 0),),
                prompt_lens=(((2,), ()),))
    with pytest.raises(ValueError, match=field):
        StepRunConfig(**{**base, **kwargs})


def test_the_sglang_pack_declares_the_gap():
    """SGLang's pack runs no DP rank program (its ranks level is a TP group's verify): it does not declare
    ranks.steps, so the report lists the contracts as not run for it instead of passing them."""
    from contracts.adapters.sglang import SGLangAdapter
    from contracts.protocol import RANKS, RANKS_STEPS

    assert not {RANKS, RANKS_STEPS} & SGLangAdapter.capabilities

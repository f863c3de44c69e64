"""Ranks level of the reference adapter, whole steps: `dspark.dp_steps.StepRankProgram` on real rank processes
started by the launcher (gloo, loopback), in every verify mode and step kind, idle ranks included.

A run is cached per case (with the rank program, the collective timeout and the identity of every dspark function
a rank calls, as `ranks` does), so the contracts of one check share a run they both draw, and a mutant gets a
fresh run.
"""

from __future__ import annotations

from collections import OrderedDict

from contracts import launcher
from contracts.adapters.reference.ranks import _RANK_MODULES, _code_fingerprint
from contracts.boundary.ranks import RankRunFailure, RankStepsCase, RankStepsRun, RankStepView
from dspark import dp_steps

_MODULES = _RANK_MODULES + ("dspark.dp_steps", "dspark.dp_padding", "dspark.planner", "dspark.disaggregation",
                            "dspark.verify.dispatch", "dspark.verify.reference")
_CACHE: "OrderedDict[tuple, RankStepsRun]" = OrderedDict()
_CACHE_SIZE = 32


def step_config(case: RankStepsCase) -> dp_steps.StepRunConfig:
    return dp_steps.StepRunConfig(
        world_size=case.world_size, verify_modes=case.verify_modes, gamma=case.gamma, kinds=case.kinds,
        batch_sizes=case.batch_sizes, prompt_lens=case.prompt_lens, capture_bs=case.capture_bs,
        budget_frac=case.budget_frac, sample_from_anchor=case.sample_from_anchor, seed=case.seed)


def _rows(v) -> tuple:
    return tuple(map(tuple, v))


def _view(o: dict) -> RankStepView:
    return RankStepView(
        rank=o["rank"], step=o["step"], verify_mode=o["verify_mode"], kind=o["kind"], bs=o["bs"], forward_mode=o["forward_mode"],
        request_counts=tuple(o["request_counts"]), forward_token_counts=tuple(o["forward_token_counts"]),
        forward_rows=_rows(o["forward_rows"]), forward_gathered=_rows(o["forward_gathered"]),
        verify_lens=tuple(o["verify_lens"]), verify_tokens=o["verify_tokens"],
        rank_verify_tokens=tuple(o["rank_verify_tokens"]), padded_verify_tokens=o["padded_verify_tokens"],
        rank_padded_verify_tokens=tuple(o["rank_padded_verify_tokens"]), verify_graph=o["verify_graph"],
        verify_rows=_rows(o["verify_rows"]), verify_gathered=_rows(o["verify_gathered"]),
        correct_len=tuple(o["correct_len"]), commit_len=tuple(o["commit_len"]), collectives=o["collectives"])


class ReferenceRankSteps:
    rank_verify_modes = dp_steps.VERIFY_MODES
    rank_step_kinds = dp_steps.STEP_KINDS

    def run_rank_steps(self, case: RankStepsCase) -> RankStepsRun:
        timeout_s = float(launcher.DEFAULT_TIMEOUT_S)
        program = dp_steps.StepRankProgram  # looked up now: a mutant replaces it
        key = (case, program, timeout_s, _code_fingerprint(_MODULES))
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
        try:
            result = launcher.launch(program, step_config(case), case.world_size, steps=len(case.schedule),
                                     timeout_s=timeout_s, backend="gloo")
        except launcher.RankFailure as e:
            run = RankStepsRun(case, (), RankRunFailure.of(e), timeout_s)
        else:
            run = RankStepsRun(case, tuple(tuple(_view(o) for o in per_rank) for per_rank in result.observations),
                               None, timeout_s)
        _CACHE[key] = run
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
        return run

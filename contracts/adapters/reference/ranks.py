"""Ranks level of the reference adapter: `dspark.dp_runner.RankProgram` (DP) and a TP verify step with
`dspark.spec_tp_sync`, on real rank processes started by the launcher (`contracts.launcher`; gloo, loopback).

A run costs a few process starts, so each scenario runs once per pytest process and its
observations serve every ranks contract. The cache key holds the rank program, the
collective timeout and the identity of every dspark function a rank calls, so a mutant
(or any monkeypatch that forked ranks would inherit) gets a fresh run.
"""

from __future__ import annotations

import inspect
import sys
import time
from collections import OrderedDict

from contracts import launcher
from contracts.adapters.reference import names as sglang_names
from contracts.boundary.ranks import RankRunFailure, RankScenario, RanksRun, RankStep, TpRankResult, TpRun, TpScenario
from contracts.strategies.ranks import run_tp, tp_inputs
from dspark import dp_runner, spec_tp_sync

_RANK_MODULES = ("dspark.dp_runner", "dspark.dspark_draft", "dspark.graph_buckets", "dspark.spec_info",
                 "dspark.forward_batch_info", "dspark.schedule_batch", "dspark.draft_input", "dspark._validate")
_CACHE: "OrderedDict[tuple, RanksRun]" = OrderedDict()
_CACHE_SIZE = 16


def _ref(value):
    """The object itself when hashable (held by the key, so its id cannot be reused), else its id."""
    try:
        hash(value)
        return value
    except TypeError:
        return id(value)


def _code_fingerprint(modules=_RANK_MODULES) -> tuple:
    """The module- and class-level callables the ranks run (a monkeypatch changes one of them)."""
    out = []
    for name in modules:
        module = sys.modules.get(name)
        if module is None:
            continue
        for attr, value in sorted(vars(module).items()):
            if inspect.isclass(value) and value.__module__ == name:
                out.extend((name, attr, k, _ref(v)) for k, v in sorted(vars(value).items()) if callable(v))
            elif callable(value):
                out.append((name, attr, _ref(value)))
    return tuple(out)


def _tuples(v):
    return None if v is None else tuple(v)


# The ranks level's neutral count names (contracts.boundary.ranks.RankStep) -> the rank program's observation keys
# (the reference ForwardBatch's attributes, SGLang's names).
FIELD_NAMES = {f: sglang_names.FIELD_NAMES[f] for f in
               ("rank_request_counts", "rank_token_counts", "rank_token_counts_device", "rank_logprob_token_counts")}


def _step(o: dict) -> RankStep:
    return RankStep(
        rank=o["rank"], step=o["step"], bs=o["bs"], forward_mode=o["forward_mode"], raw_counts=tuple(o["raw_counts"]),
        **{field: _tuples(o[key]) for field, key in FIELD_NAMES.items()},
        graph_bs=o["graph_bs"], local_verify_tier=o["local_verify_tier"],
        gathered_verify_tiers=tuple(o["gathered_verify_tiers"]), verify_tier=o["verify_tier"],
        local_rows=tuple(map(tuple, o["local_rows"])), gathered_rows=tuple(map(tuple, o["gathered_rows"])),
        collectives=o["collectives"],
    )


def scenario_config(scenario: RankScenario) -> dp_runner.DpRunConfig:
    return dp_runner.DpRunConfig(
        world_size=scenario.world_size, batch_sizes=scenario.batch_sizes, verify_budgets=scenario.verify_budgets,
        gamma=scenario.gamma, sample_from_anchor=scenario.sample_from_anchor, capture_bs=scenario.capture_bs,
        max_running_requests=scenario.max_running_requests, seed=scenario.seed,
    )


def run_dp(cfg: dp_runner.DpRunConfig, program=None, **launch_options) -> launcher.LaunchResult:
    """`cfg` on its `world_size` rank processes, one observation per rank and step. `program` defaults to
    `dp_runner.RankProgram`, looked up now (a mutant replaces it); `launch_options` go to `launcher.launch`."""
    program = program if program is not None else dp_runner.RankProgram
    return launcher.launch(program, cfg, cfg.world_size, steps=cfg.steps, **launch_options)


class ReferenceRanks:
    rank_backend = "gloo"  # the reference adapter runs on the CPU, whatever the machine has

    def run_tp_scenario(self, scenario: TpScenario) -> TpRun:
        return run_tp(scenario, TpProgram, self.rank_backend)

    def run_rank_scenario(self, scenario: RankScenario) -> RanksRun:
        timeout_s = float(launcher.DEFAULT_TIMEOUT_S)
        key = (scenario, dp_runner.RankProgram, timeout_s, self.rank_backend, _code_fingerprint())
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
        t0 = time.monotonic()
        try:
            result = run_dp(scenario_config(scenario), timeout_s=timeout_s, backend=self.rank_backend)
        except launcher.RankFailure as e:
            run = RanksRun(scenario, (), RankRunFailure.of(e), timeout_s, time.monotonic() - t0)
        else:
            ranks = tuple(tuple(_step(o) for o in per_rank) for per_rank in result.observations)
            run = RanksRun(scenario, ranks, None, timeout_s, result.wall_s)
        _CACHE[key] = run
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
        return run


class TpProgram:
    """A reference TP rank: the verify step with `dspark.spec_tp_sync` syncing at the planner and accept sites."""

    def __init__(self, rank: int, scenario: TpScenario, comm):
        self.rank, self.scenario = rank, scenario

    def run(self):
        s = self.scenario
        conf, cand, logits, prefix = tp_inputs(s, self.rank)
        sync = spec_tp_sync.SpecTpSync(s.world_size)
        local, lens, acc, fin = spec_tp_sync.verify_under_tp_sync(conf, s.budget, cand, logits, prefix, sync)
        return [TpRankResult.of(self.rank, local, lens, acc.correct_len, acc.bonus, acc.cap_trim, fin.commit_len,
                                fin.new_seq_lens)]

"""Ranks level of the reference adapter: `dspark.dp_runner` on real rank processes (gloo, loopback).

A run costs a few process starts, so each scenario runs once per pytest process and its
observations serve every ranks contract. The cache key holds the rank program, the
collective timeout and the identity of every dspark function a rank calls, so a mutant
(or any monkeypatch that forked ranks would inherit) gets a fresh run.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import time
from collections import OrderedDict

from contracts.adapters.reference import names as sglang_names
from contracts.boundary.ranks import RankRunFailure, RankScenario, RanksRun, RankStep, TpRankResult, TpRun, TpScenario
from contracts.strategies.ranks import tp_inputs
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


def _code_fingerprint() -> tuple:
    """The module- and class-level callables the ranks run (a monkeypatch changes one of them)."""
    out = []
    for name in _RANK_MODULES:
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


def scenario_config(scenario: RankScenario, timeout_s: float) -> dp_runner.DpRunConfig:
    return dp_runner.DpRunConfig(
        world_size=scenario.world_size, batch_sizes=scenario.batch_sizes, verify_budgets=scenario.verify_budgets,
        gamma=scenario.gamma, sample_from_anchor=scenario.sample_from_anchor, capture_bs=scenario.capture_bs,
        max_running_requests=scenario.max_running_requests, seed=scenario.seed, timeout_s=timeout_s,
    )


class ReferenceRanks:
    rank_backend = "gloo"  # the reference adapter runs on the CPU, whatever the machine has

    def run_tp_scenario(self, scenario: TpScenario) -> TpRun:
        return run_tp(scenario, TpProgram, self.rank_backend)

    def run_rank_scenario(self, scenario: RankScenario) -> RanksRun:
        timeout_s = float(dp_runner.DEFAULT_TIMEOUT_S)
        key = (scenario, dp_runner.RankProgram, timeout_s, self.rank_backend, _code_fingerprint())
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
        cfg = scenario_config(scenario, timeout_s)
        t0 = time.monotonic()
        try:
            result = dp_runner.run_dp(cfg, backend=self.rank_backend)
        except dp_runner.RankFailure as e:
            run = RanksRun(scenario, (), RankRunFailure(e.rank, e.kind, str(e)), timeout_s, time.monotonic() - t0)
        else:
            ranks = tuple(tuple(_step(o) for o in per_rank) for per_rank in result.observations)
            run = RanksRun(scenario, ranks, None, timeout_s, result.wall_s)
        _CACHE[key] = run
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
        return run


def tp_result(rank: int, local, lens, correct, bonus, trim, commit, new_seq) -> dict:
    listed = lambda t: [int(x) for x in t.tolist()]  # noqa: E731
    return dict(rank=rank, local_verify_lens=listed(local), verify_lens=listed(lens), correct_len=listed(correct),
                bonus=listed(bonus), cap_trim=listed(trim), commit_len=listed(commit), new_seq_lens=listed(new_seq))


def run_ranks(world_size: int, payload, program, backend: str = "gloo"):
    """`program` on `world_size` rank processes started by the project's DP runner (it reads the payload and the
    collective timeout from its config): (per-rank observations, None), or ((), the RankRunFailure)."""
    cfg = dp_runner.DpRunConfig(world_size=world_size, batch_sizes=((0,) * world_size,), gamma=1, max_running_requests=1,
                                timeout_s=float(dp_runner.DEFAULT_TIMEOUT_S), payload=payload)
    try:
        return dp_runner.run_dp(cfg, program=program, backend=backend).observations, None
    except dp_runner.RankFailure as e:
        return (), RankRunFailure(e.rank, e.kind, str(e))


def run_tp(scenario: TpScenario, program, backend: str = "gloo") -> TpRun:
    """The scenario on `world_size` rank processes; `program` reads it from the config's payload."""
    observations, failure = run_ranks(scenario.world_size, dataclasses.astuple(scenario), program, backend)
    return TpRun(scenario, tuple(TpRankResult(**{k: (v if k == "rank" else tuple(v)) for k, v in obs[0].items()})
                                 for obs in observations), failure)


class TpProgram:
    """A reference TP rank: the verify step with `dspark.spec_tp_sync` syncing at the planner and accept sites."""

    def __init__(self, rank, cfg, comm):
        self.rank, self.cfg = rank, cfg

    def run(self):
        scenario = TpScenario(*self.cfg.payload)
        conf, cand, logits, prefix = tp_inputs(scenario, self.rank)
        sync = spec_tp_sync.SpecTpSync(scenario.world_size)
        local, lens, acc, fin = spec_tp_sync.verify_under_tp_sync(conf, scenario.budget, cand, logits, prefix, sync)
        return [tp_result(self.rank, local, lens, acc.correct_len, acc.bonus, acc.cap_trim, fin.commit_len,
                          fin.new_seq_lens)]

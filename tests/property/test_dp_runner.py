"""`dspark.dp_runner`: the DSpark DP rank program on real rank processes (started by `contracts.launcher`), its
config, tier arithmetic and per-rank inputs, and its faults named by rank. The launcher's own supervision and
diagnosis are tested with neutral programs in test_launcher.py."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from bisect import bisect_left
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from contracts.adapters.reference import ReferenceAdapter
from contracts.adapters.reference.ranks import run_dp, scenario_config
from contracts.launcher import RankFailure
from contracts.registry import all_contracts
from contracts.runner import run_contract
from contracts.strategies.ranks import small_rank_scenarios
from contracts.violation import ContractViolation
from dspark import dp_runner
from dspark.dp_runner import DpRunConfig, RankProgram, expected_local_rows, seeded_config
from tests.property.mutants import ranks as rank_mutants
from tests.property.rank_processes import no_orphans  # noqa: F401 - autouse fixture


def _bucket(cfg, raw):
    buckets = sorted(cfg.capture_bs)
    return None if raw > buckets[-1] else buckets[bisect_left(buckets, raw)]


def _check_run(cfg: DpRunConfig, observations):
    q = cfg.query_token_num
    assert len(observations) == cfg.world_size
    for r, steps in enumerate(observations):
        assert [o["step"] for o in steps] == list(range(cfg.steps)), f"rank {r}"
        for s, o in enumerate(steps):
            raw = list(cfg.batch_sizes[s])
            where = f"rank {r} step {s}"
            assert o["raw_counts"] == raw, where
            assert o["original_global_num_tokens_cpu"] == raw, where
            assert o["global_num_tokens_cpu"] == [c * q for c in raw], where
            assert o["global_num_tokens_gpu"] == [c * q for c in raw], where
            assert o["graph_bs"] == _bucket(cfg, max(raw)), where
            assert o["forward_mode"] == ("IDLE" if raw[r] == 0 else "DRAFT_EXTEND"), where
            assert o["collectives"] == len(dp_runner.OPS), where
            assert o["num_token_non_padded_cpu"] == raw[r] * q, where
            assert o["local_rows"] == expected_local_rows(cfg, s, r), where
            expected_rows = [row for src in range(cfg.world_size) for row in expected_local_rows(cfg, s, src)]
            assert o["gathered_rows"] == expected_rows, where
            assert len(o["gathered_rows"]) == sum(raw) * q, where
    for s in range(cfg.steps):  # the cross-rank view: every rank holds one value per field
        for field in ("global_num_tokens_cpu", "original_global_num_tokens_cpu", "graph_bs", "verify_tier",
                      "gathered_verify_tiers", "views"):
            assert len({json.dumps(observations[r][s][field]) for r in range(cfg.world_size)}) == 1, (s, field)


@pytest.mark.parametrize("world_size, seed", [(2, 3), (4, 11)])
def test_ranks_agree_and_rows_arrive_intact(world_size, seed):
    cfg = seeded_config(seed, world_size, steps=4, idle_fraction=0.5, gamma=3)
    assert any(0 in row for row in cfg.batch_sizes), "the seed should give idle ranks"
    result = run_dp(cfg, timeout_s=20.0)
    assert (result.backend, result.start_method) == ("gloo", "fork") or torch.cuda.is_available()
    _check_run(cfg, result.observations)


def test_idle_and_all_idle_steps_and_single_rank():
    cfg = DpRunConfig(2, ((0, 0), (0, 3), (9, 0)), ((0, 0), (0, None), (4, 0)), gamma=2, sample_from_anchor=False,
                      max_running_requests=16)
    obs = run_dp(cfg, timeout_s=20.0).observations
    _check_run(cfg, obs)
    assert [obs[0][s]["verify_tier"] for s in range(3)] == [None, None, 13]  # all 0; rank without budget; max
    assert obs[1][2]["graph_bs"] is None  # 9 requests exceed the largest captured bucket (8)
    single = DpRunConfig(1, ((2,), (0,)))
    _check_run(single, run_dp(single, timeout_s=20.0).observations)


def test_program_declares_its_collectives():
    assert RankProgram.OPS == dp_runner.OPS == ("counts", "views", "draft_tokens")


def test_verify_tier_arithmetic():
    assert dp_runner.local_verify_tier_num_tokens(3, 5, 5) == 8
    assert dp_runner.local_verify_tier_num_tokens(3, 100, 5) == 15
    assert dp_runner.local_verify_tier_num_tokens(3, None, 5) == -1
    assert dp_runner.dp_global_verify_tier_num_tokens([8, 0, 3]) == 8
    assert dp_runner.dp_global_verify_tier_num_tokens([8, -1, 3]) is None
    assert dp_runner.dp_global_verify_tier_num_tokens([0, 0]) is None


@pytest.mark.parametrize("kwargs, field", [
    (dict(world_size=0, batch_sizes=((),)), "world_size"),
    (dict(world_size=-2, batch_sizes=((1,),)), "world_size"),
    (dict(world_size=2, batch_sizes=((1, 0), (1, 0, 2))), r"batch_sizes\[1\]"),
    (dict(world_size=3, batch_sizes=((1, 0),)), r"batch_sizes\[0\]"),
    (dict(world_size=2, batch_sizes=((1, 0),), verify_budgets=((1, 2, 3),)), r"verify_budgets\[0\]"),
    (dict(world_size=2, batch_sizes=((1, 0), (0, 0)), verify_budgets=((1, 2),)), "verify_budgets"),
    (dict(world_size=2, batch_sizes=((1, -1),)), r"batch_sizes\[0\]"),
])
def test_bad_input_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        DpRunConfig(**kwargs)
    assert multiprocessing.active_children() == []


def test_seeded_config_rejects_empty_world():
    with pytest.raises(ValueError, match="world_size"):
        seeded_config(0, 0, 3)


class _Comm:
    world_size, device = 2, torch.device("cpu")


def test_program_refuses_a_config_that_does_not_fit_the_run():
    with pytest.raises(TypeError, match="cfg: expected a DpRunConfig"):
        RankProgram(0, (2, ((1, 1),)), _Comm())
    with pytest.raises(ValueError, match="cfg.world_size"):
        RankProgram(0, DpRunConfig(3, ((1, 1, 1),)), _Comm())


def test_idle_rank_that_skips_a_collective_is_named_within_the_timeout():
    cfg = DpRunConfig(2, ((2, 0), (1, 1)))
    t0 = time.monotonic()
    with pytest.raises(RankFailure, match="rank 1 is out of step") as caught:
        run_dp(cfg, rank_mutants.IdleRankSkipsGather, timeout_s=rank_mutants.SHORT_TIMEOUT_S)
    assert time.monotonic() - t0 < rank_mutants.SHORT_TIMEOUT_S + 6.0
    assert (caught.value.rank, caught.value.kind, caught.value.step) == (1, "desync", 1)


@pytest.mark.e2e
def test_skip_in_the_last_collective_still_fails_by_timeout():
    cfg = DpRunConfig(2, ((1, 1), (3, 0)))  # rank 1 is idle only in the last step
    t0 = time.monotonic()
    with pytest.raises(RankFailure, match="rank 1 is out of step") as caught:
        run_dp(cfg, rank_mutants.IdleRankSkipsGather, timeout_s=1.0)
    assert time.monotonic() - t0 < 1.0 + 6.0
    assert "rank 0: RuntimeError in step 1 collective 'draft_tokens'" in str(caught.value)


@pytest.mark.parametrize("mutant", rank_mutants.MUTANTS, ids=lambda m: m.name)
def test_ranks_mutants_name_the_faulty_rank(mutant):
    contracts, engine = all_contracts(), ReferenceAdapter()
    for cid in mutant.catches:
        with mutant.active(), pytest.raises(ContractViolation) as caught:
            run_contract(contracts[cid], engine, profile="ci")
        assert f"rank {rank_mutants.FAULTY_RANK}" in caught.value.what, str(caught.value)


@pytest.mark.e2e
def test_fault_reaches_spawned_ranks():
    """Under spawn the children re-import dspark: the program class must travel as data.

    One rank only: a spawned rank imports torch afresh, which costs seconds on this machine.
    """
    cfg = DpRunConfig(1, ((3,), (0,)))
    result = run_dp(cfg, rank_mutants.ScaledOriginalOnRankZero, timeout_s=30.0, start_method="spawn")
    assert result.start_method == "spawn"
    obs = result.observations[0]
    assert obs[0]["original_global_num_tokens_cpu"] == [12]  # the broken proposer ran in the spawned rank
    assert obs[1]["original_global_num_tokens_cpu"] == [0] and obs[1]["forward_mode"] == "IDLE"


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=small_rank_scenarios())
def test_drawn_scenarios(scenario):
    """A few drawn scenarios (world 1-4, any gamma, both draft widths), each one multi-process run."""
    cfg = scenario_config(scenario)
    _check_run(cfg, run_dp(cfg, timeout_s=20.0).observations)


@pytest.mark.gpu
def test_nccl_ranks():
    if torch.cuda.device_count() < 2:
        pytest.skip("NCCL ranks need one GPU each; fewer than 2 GPUs")
    cfg = seeded_config(5, 2, steps=3)
    result = run_dp(cfg, timeout_s=60.0, backend="nccl")
    assert result.backend == "nccl"
    _check_run(cfg, result.observations)


@pytest.mark.bench
@pytest.mark.parametrize("world_size", [4, 8, 16])
def test_bench_dp_ranks(benchmark, world_size):
    cfg = seeded_config(world_size, world_size, steps=8, max_bs=8, idle_fraction=0.3)
    results = []
    benchmark.pedantic(lambda: results.append(run_dp(cfg, timeout_s=60.0)), rounds=2, iterations=1)
    _check_run(cfg, results[-1].observations)
    info = {"world_size": world_size, "steps": cfg.steps, "cpus": os.cpu_count(),
            "run_s": [round(r.wall_s, 3) for r in results], "backend": results[-1].backend}
    benchmark.extra_info.update(info)
    out = Path(os.environ.get("DSPARK_BENCH_JSON_DIR", "bench_results")) / f"dp_ranks_{world_size}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(info))

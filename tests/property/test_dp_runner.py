"""`dspark.dp_runner`: real DP ranks as processes, their failures, and that none outlives a run."""

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
from contracts.adapters.reference.ranks import scenario_config
from contracts.registry import all_contracts
from contracts.runner import run_contract
from contracts.strategies.ranks import small_rank_scenarios
from contracts.violation import ContractViolation
from dspark import dp_runner
from dspark.dp_runner import DpRunConfig, RankFailure, expected_local_rows, run_dp, seeded_config
from tests.property.mutants import ranks as rank_mutants


def _os_children() -> set:
    """PIDs whose parent is this process, zombies included (Linux /proc); multiprocessing's own
    resource tracker, which lives as long as this process by design, is left out."""
    me, out = os.getpid(), set()
    for entry in Path("/proc").iterdir() if Path("/proc/self/stat").exists() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            cmd = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me and b"resource_tracker" not in cmd:
            out.add(int(entry.name))
    return out


@pytest.fixture(autouse=True)
def no_orphans():
    before_mp, before_os = set(multiprocessing.active_children()), _os_children()
    yield
    left = [p for p in multiprocessing.active_children() if p not in before_mp]
    assert left == [], f"rank processes outlived the run: {left}"
    assert _os_children() - before_os == set(), "child processes (or zombies) left behind"


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
    cfg = seeded_config(seed, world_size, steps=4, idle_fraction=0.5, gamma=3, timeout_s=20.0)
    assert any(0 in row for row in cfg.batch_sizes), "the seed should give idle ranks"
    result = run_dp(cfg)
    assert (result.backend, result.start_method) == ("gloo", "fork") or torch.cuda.is_available()
    _check_run(cfg, result.observations)


def test_idle_and_all_idle_steps_and_single_rank():
    cfg = DpRunConfig(2, ((0, 0), (0, 3), (9, 0)), ((0, 0), (0, None), (4, 0)), gamma=2, sample_from_anchor=False,
                      max_running_requests=16, timeout_s=20.0)
    obs = run_dp(cfg).observations
    _check_run(cfg, obs)
    assert [obs[0][s]["verify_tier"] for s in range(3)] == [None, None, 13]  # all 0; rank without budget; max
    assert obs[1][2]["graph_bs"] is None  # 9 requests exceed the largest captured bucket (8)
    single = DpRunConfig(1, ((2,), (0,)), timeout_s=20.0)
    _check_run(single, run_dp(single).observations)


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
    (dict(world_size=2, batch_sizes=((1, 0),), timeout_s=0), "timeout_s"),
])
def test_bad_input_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        DpRunConfig(**kwargs)
    assert multiprocessing.active_children() == []


def test_seeded_config_rejects_empty_world():
    with pytest.raises(ValueError, match="world_size"):
        seeded_config(0, 0, 3)


def test_rank_that_dies_mid_step_is_named():
    cfg = DpRunConfig(4, ((1, 0, 2, 1), (2, 1, 0, 1), (1, 1, 1, 1)), timeout_s=10.0)
    t0 = time.monotonic()
    with pytest.raises(RankFailure, match=r"DP rank 1 died mid-step \(exit code 17\)") as caught:
        run_dp(cfg, program=rank_mutants.DiesMidStep)
    assert time.monotonic() - t0 < cfg.timeout_s
    assert (caught.value.rank, caught.value.kind, caught.value.step) == (1, "died", rank_mutants.DYING_STEP)


def test_rank_that_raises_is_named_with_its_error():
    cfg = DpRunConfig(3, ((1, 0, 2), (2, 1, 0)), timeout_s=10.0)
    t0 = time.monotonic()
    with pytest.raises(RankFailure, match="DP rank 1 raised ValueError .*injected failure") as caught:
        run_dp(cfg, program=rank_mutants.RaisesMidStep)
    assert time.monotonic() - t0 < cfg.timeout_s
    assert (caught.value.rank, caught.value.kind) == (1, "error")
    assert "raise ValueError" in caught.value.tracebacks[1]


def test_stalled_rank_turns_into_a_timeout_naming_it():
    cfg = DpRunConfig(2, ((1, 2), (2, 1), (1, 1)), timeout_s=1.0)  # healthy collectives take milliseconds
    t0 = time.monotonic()
    with pytest.raises(RankFailure, match="DP rank 1 never reached") as caught:
        run_dp(cfg, program=rank_mutants.StallsMidStep)
    elapsed = time.monotonic() - t0
    assert caught.value.kind == "timeout" and caught.value.rank == 1
    assert cfg.timeout_s <= elapsed < cfg.timeout_s + 6.0
    assert "Timed out" in str(caught.value) or "timed out" in str(caught.value).lower()


def test_parent_watchdog_catches_a_hang_no_collective_reports():
    cfg = DpRunConfig(2, ((1, 2), (2, 1), (1, 1)), timeout_s=60.0)  # the gloo timeout would come far too late
    t0 = time.monotonic()
    with pytest.raises(RankFailure, match=r"DP rank 1 never reached .*watchdog: no progress for 1s") as caught:
        run_dp(cfg, program=rank_mutants.StallsMidStep, watchdog_s=1.0)
    assert time.monotonic() - t0 < 10.0
    assert (caught.value.rank, caught.value.kind) == (1, "timeout")


def test_idle_rank_that_skips_a_collective_is_named_within_the_timeout():
    cfg = DpRunConfig(2, ((2, 0), (1, 1)), timeout_s=rank_mutants.SHORT_TIMEOUT_S)
    t0 = time.monotonic()
    with pytest.raises(RankFailure, match="DP rank 1 is out of step") as caught:
        run_dp(cfg, program=rank_mutants.IdleRankSkipsGather)
    assert time.monotonic() - t0 < cfg.timeout_s + 6.0
    assert (caught.value.rank, caught.value.kind) == (1, "desync")


def test_skip_in_the_last_collective_still_fails_by_timeout():
    cfg = DpRunConfig(2, ((1, 1), (3, 0)), timeout_s=1.0)  # rank 1 is idle only in the last step
    t0 = time.monotonic()
    with pytest.raises(RankFailure, match="DP rank 1 is out of step") as caught:
        run_dp(cfg, program=rank_mutants.IdleRankSkipsGather)
    assert time.monotonic() - t0 < cfg.timeout_s + 6.0
    assert "rank 0: RuntimeError in step 1 collective 'draft_tokens'" in str(caught.value)


@pytest.mark.parametrize("mutant", rank_mutants.MUTANTS, ids=lambda m: m.name)
def test_ranks_mutants_name_the_faulty_rank(mutant):
    contracts, engine = all_contracts(), ReferenceAdapter()
    for cid in mutant.catches:
        with mutant.active(), pytest.raises(ContractViolation) as caught:
            run_contract(contracts[cid], engine, profile="ci")
        assert f"rank {rank_mutants.FAULTY_RANK}" in caught.value.what, str(caught.value)


@pytest.mark.slow
def test_fault_reaches_spawned_ranks():
    """Under spawn the children re-import dspark: the program class must travel as data.

    One rank only: a spawned rank imports torch afresh, which costs seconds on this machine.
    """
    cfg = DpRunConfig(1, ((3,), (0,)), timeout_s=30.0)
    result = run_dp(cfg, program=rank_mutants.ScaledOriginalOnRankZero, start_method="spawn")
    assert result.start_method == "spawn"
    obs = result.observations[0]
    assert obs[0]["original_global_num_tokens_cpu"] == [12]  # the broken proposer ran in the spawned rank
    assert obs[1]["original_global_num_tokens_cpu"] == [0] and obs[1]["forward_mode"] == "IDLE"


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=small_rank_scenarios())
def test_drawn_scenarios(scenario):
    """A few drawn scenarios (world 1-4, any gamma, both draft widths), each one multi-process run."""
    cfg = scenario_config(scenario, timeout_s=20.0)
    _check_run(cfg, run_dp(cfg).observations)


@pytest.mark.gpu
def test_nccl_ranks():
    if torch.cuda.device_count() < 2:
        pytest.skip("NCCL ranks need one GPU each; fewer than 2 GPUs")
    cfg = seeded_config(5, 2, steps=3, timeout_s=60.0)
    result = run_dp(cfg, backend="nccl")
    assert result.backend == "nccl"
    _check_run(cfg, result.observations)


@pytest.mark.bench
@pytest.mark.parametrize("world_size", [4, 8, 16])
def test_bench_dp_ranks(benchmark, world_size):
    cfg = seeded_config(world_size, world_size, steps=8, max_bs=8, idle_fraction=0.3, timeout_s=60.0)
    results = []
    benchmark.pedantic(lambda: results.append(run_dp(cfg)), rounds=2, iterations=1)
    _check_run(cfg, results[-1].observations)
    info = {"world_size": world_size, "steps": cfg.steps, "cpus": os.cpu_count(),
            "run_s": [round(r.wall_s, 3) for r in results], "backend": results[-1].backend}
    benchmark.extra_info.update(info)
    out = Path(os.environ.get("DSPARK_BENCH_JSON_DIR", "bench_results")) / f"dp_ranks_{world_size}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(info))

"""Benchmarks of the reference engine (run with `-m bench`; pytest-benchmark).

tau = tokens emitted per target forward (per request per step). The oracle
drafter must reach gamma + 1 exactly; the toy drafter's tau is recorded. The
step figures, at bs = 64: one decode step's time over the time of the target and
draft forwards it contains (`step_over_forward`), and the bookkeeping overhead,
the step's time outside those forwards, over the same forwards
(`overhead_over_forward`, the goal's figure: step_over_forward - 1).
"""

import time

import pytest
import torch

from contracts.machine import single_thread
from dspark.engine import DSparkConfig, DSparkEngine, Request, SamplingParams
from dspark.toy_models import ToyTarget, make_drafter

pytestmark = pytest.mark.bench


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with single_thread():  # small float64 tensors run faster and steadier on one intra-op thread
        yield

V, GAMMA, BS = 16, 4, 64
TARGET = ToyTarget(V, seed=0)


def _engine(drafter, mode="static", **cfg):
    return DSparkEngine(TARGET, make_drafter(drafter, TARGET), DSparkConfig(gamma=GAMMA, verify_mode=mode, pool_size=BS,
                                                                             max_context_len=256, **cfg))


def _requests(max_new, temperature=0.0):
    return [Request(i, (i % V, (5 * i + 1) % V), SamplingParams(temperature, 0, max_new)) for i in range(BS)]


def _tau(engine) -> float:
    recs = engine.records
    return sum(sum(r.commit_lens) for r in recs) / sum(len(r.rids) for r in recs)


def test_oracle_tau_is_gamma_plus_one(benchmark):
    steps = 6
    max_new = 1 + steps * (GAMMA + 1)  # every decode step commits exactly gamma + 1 tokens

    def run():
        eng = _engine("oracle")
        eng.generate(_requests(max_new))
        return eng

    eng = benchmark.pedantic(run, rounds=3, iterations=1)
    assert all(r.commit_lens == [GAMMA + 1] * len(r.rids) for r in eng.records)
    assert _tau(eng) == GAMMA + 1
    benchmark.extra_info["tau"] = _tau(eng)


@pytest.mark.parametrize("mode, frac", [("static", None), ("compact", 0.5)])
@pytest.mark.parametrize("drafter", ["vanilla", "gated", "rnn"])
def test_toy_drafter_tau(benchmark, drafter, mode, frac):
    def run():
        eng = _engine(drafter, mode, force_budget_frac=frac)
        eng.generate(_requests(32))
        return eng

    eng = benchmark.pedantic(run, rounds=2, iterations=1)
    tau = _tau(eng)
    assert 1.0 <= tau <= GAMMA + 1
    benchmark.extra_info.update(tau=tau, target_tokens=sum(r.target_tokens for r in eng.records), steps=len(eng.records))


class _Timed:
    """Stands in for a model: each method call runs the real one and adds its time to `spent[0]`, so a step's
    model forwards are timed as the step runs them (the rest of the step is the engine's bookkeeping)."""

    def __init__(self, inner, spent: list):
        self._inner, self._spent = inner, spent

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                self._spent[0] += time.perf_counter() - t0
        return timed


def test_step_time_over_forward_time_at_bs64(benchmark):
    """Two floors for one decode step at bs = 64: the step's own model calls, timed as it makes them
    (`step_over_forward`: the step over its forwards, so 1 + bookkeeping / forwards), and the same two forwards
    run alone in a warm loop (`step_over_standalone_forward`; lower per-call cost, hence a larger ratio)."""
    spent, ratios = [0.0], []

    def setup():
        eng = _engine("vanilla", "compact", force_budget_frac=0.5)
        eng.prefill(_requests(64))
        eng.step()  # past the first (verify-all) decode
        eng.target, eng.drafter = _Timed(eng.target, spent), _Timed(eng.drafter, spent)
        return (eng,), {}

    def step(eng):
        spent[0] = 0.0
        t0 = time.perf_counter()
        eng.step()
        ratios.append((time.perf_counter() - t0) / spent[0])

    benchmark.pedantic(step, setup=setup, rounds=30, iterations=1)
    eng = setup()[0][0]
    rows = eng.rows
    prev2 = torch.tensor([st.cache_tokens[-1] for st in rows])
    cand = torch.randint(0, V, (BS, GAMMA + 1), generator=torch.Generator().manual_seed(0))
    noise = torch.zeros(BS, GAMMA, V, dtype=torch.float64)
    contexts = eng.draft_pool.batch(eng.batch.req_pool_indices)  # what the engine hands its drafter
    t0 = time.perf_counter()
    for _ in range(10):
        TARGET.forward_pairs(prev2, cand)
        eng.drafter._inner.draft_block([st.cache_tokens for st in rows], contexts, cand[:, 0], GAMMA,
                                       torch.zeros(BS, dtype=torch.float64), noise, GAMMA)
    forward = (time.perf_counter() - t0) / 10
    ratios.sort()
    in_step = ratios[len(ratios) // 2]
    benchmark.extra_info.update(step_over_forward=in_step, overhead_over_forward=in_step - 1,
                                standalone_forward_seconds=forward)
    if benchmark.stats is not None:  # None under --benchmark-disable
        standalone = benchmark.stats.stats.median / forward
        benchmark.extra_info.update(step_over_standalone_forward=standalone,
                                    overhead_over_standalone_forward=standalone - 1)
    # Reported, not asserted: the step adds planning, verify and bookkeeping to the two forwards.

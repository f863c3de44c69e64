"""End-to-end behaviour of the reference engine on the toy models (the stateful contracts cover the rest)."""

import pytest
import torch

from contracts.machine import single_thread
from dspark.engine import VERIFY_MODES, DSparkConfig, DSparkEngine, Request, SamplingParams
from dspark.mem_cache import DraftContextPool
from dspark.toy_models import DRAFTERS, ToyTarget, make_drafter, target_greedy_decode


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with single_thread():  # small float64 tensors run faster and steadier on one intra-op thread
        yield


V = 8
TARGET = ToyTarget(V, seed=1)


def _engine(drafter="vanilla", **cfg):
    return DSparkEngine(TARGET, make_drafter(drafter, TARGET), DSparkConfig(**cfg))


def _requests(n, max_new=9, temperature=0.0, eos=None):
    return [Request(i, (i % V, (3 * i + 1) % V), SamplingParams(temperature, 0, max_new, eos)) for i in range(n)]


@pytest.mark.parametrize("mode", VERIFY_MODES)
@pytest.mark.parametrize("drafter", DRAFTERS)
def test_greedy_generation_is_plain_greedy_decoding(mode, drafter):
    eng = _engine(drafter, gamma=3, verify_mode=mode, force_budget_frac=None if mode == "static" else 0.5)
    reqs = _requests(4, eos=5)
    out = eng.generate(reqs)
    for r in reqs:
        assert out[r.rid] == target_greedy_decode(TARGET, r.prompt, r.params.max_new_tokens, r.params.eos_id)


def test_oracle_drafter_emits_gamma_plus_one_tokens_per_forward():
    eng = _engine("oracle", gamma=4)
    eng.generate(_requests(3, max_new=1 + 5 * 4))
    assert all(r.commit_lens == [5] * len(r.rids) for r in eng.records)


def test_compact_mode_runs_only_the_verified_rows():
    eng = _engine(gamma=3, verify_mode="compact", force_budget_frac=0.25, capture_bs=(1, 2, 4, 8))
    eng.generate(_requests(4, max_new=12))
    for rec in eng.records:
        assert rec.target_tokens == sum(rec.verify_lens)
        if rec.graph_num_tokens is not None:
            assert rec.graph_num_tokens >= rec.target_tokens
    assert any(not all(L == 4 for L in rec.verify_lens) for rec in eng.records)


def test_without_overlap_the_budget_reads_the_confidence_of_two_steps_ago():
    """SGLang's host planner carries the confidence itself: rows with no history count as certain (1s)."""
    eng = _engine(gamma=3, verify_mode="cap-accept", force_budget_frac=0.25)
    eng.prefill(_requests(2, max_new=20))
    steps = [eng.step() for _ in range(3)]
    assert all(s.planned == [True, True] and s.budget == 1 for s in steps)  # floor(0.25 * 2 * 3)
    assert steps[0].budget_confidence == steps[1].budget_confidence == [[1.0] * 3] * 2
    assert sum(L - 1 for L in steps[2].verify_lens) <= 1
    assert steps[2].budget_confidence != [[1.0] * 3] * 2


def test_with_overlap_nothing_is_planned_until_the_relay_has_lagged_confidence():
    eng = _engine(gamma=3, verify_mode="cap-accept", force_budget_frac=0.25, enable_overlap=True)
    eng.prefill(_requests(2, max_new=20))
    first, second, third = (eng.step() for _ in range(3))
    for s in (first, second):
        assert s.planned == [False, False] and s.verify_lens == [4, 4] and s.budget is None
    assert third.planned == [True, True] and third.budget == 1 and third.budget_confidence is not None


def test_switching_overlap_starts_the_confidence_path_afresh():
    """History left in the relay ring (or the carry) from an earlier period is not read as `lag` steps old."""
    eng = _engine(gamma=3, verify_mode="cap-accept", force_budget_frac=0.25, enable_overlap=True)
    eng.prefill(_requests(2, max_new=40))
    on = [eng.step() for _ in range(3)]
    eng.set_overlap(False)
    off = [eng.step() for _ in range(3)]
    eng.set_overlap(True)
    again = [eng.step() for _ in range(3)]
    assert [s.budget is None for s in on + again] == [True, True, False] * 2  # the relay ring starts empty again
    assert all(s.budget is not None for s in off)
    assert off[0].budget_confidence == off[1].budget_confidence == [[1.0] * 3] * 2  # the carry too (no own history)
    assert again[2].budget_confidence != [[1.0] * 3] * 2


def test_a_reused_row_never_lends_its_previous_occupants_confidence():
    eng = _engine(gamma=2, verify_mode="cap-accept", enable_overlap=True, pool_size=1)
    eng.prefill(_requests(1, max_new=4))
    eng.run_to_completion()
    eng.prefill([Request(9, (1, 2), SamplingParams(max_new_tokens=6))])  # takes the same row, a new generation
    steps = [eng.step() for _ in range(2)]
    assert all(s.budget_confidence in (None, [[1.0, 1.0]]) for s in steps)


def test_pd_handoff_and_local_prefill_agree():
    reqs = _requests(3, max_new=10, temperature=1.0)
    local = _engine(gamma=2, seed=7).generate(reqs)
    prefill, decode = _engine(gamma=2, seed=7), _engine(gamma=2, seed=7, enable_overlap=True)
    decode.accept_handoff(prefill.prefill_for_handoff(reqs))
    decode.run_to_completion()
    assert {r.rid: decode.done[r.rid].output for r in reqs} == local


def test_overlap_toggles_mid_run_change_nothing():
    reqs = _requests(3, max_new=12, temperature=0.7)
    plain = _engine(gamma=3, seed=3).generate(reqs)
    eng = _engine(gamma=3, seed=3)
    eng.prefill(reqs)
    n = 0
    while eng.batch is not None:
        eng.set_overlap(n % 2 == 0)
        eng.step()
        n += 1
    assert {r.rid: eng.done[r.rid].output for r in reqs} == plain


def test_finished_requests_leave_and_new_ones_join():
    eng = _engine(gamma=2, pool_size=3)
    eng.prefill(_requests(2, max_new=3))
    eng.step()
    eng.prefill([Request(10, (1, 1), SamplingParams(max_new_tokens=6))])
    eng.run_to_completion()
    assert set(eng.done) == {0, 1, 10} and eng.batch is None and sorted(eng.free_rows) == [0, 1, 2]
    assert eng.done[10].output == target_greedy_decode(TARGET, (1, 1), 6)


def test_same_seed_same_records():
    def run():
        eng = _engine(gamma=3, verify_mode="compact", seed=11)
        eng.generate(_requests(4, max_new=8, temperature=1.0))
        return [(r.verify_lens, r.commit_lens, r.emitted) for r in eng.records]
    assert run() == run()


def test_cache_is_recompute_from_scratch():
    eng = _engine(gamma=3)
    eng.prefill(_requests(2, max_new=15))
    for _ in range(3):
        eng.step()
    for st in eng.rows:
        committed = st.prompt + st.output[:-1]
        assert st.cache_tokens == committed
        _, hidden = TARGET.forward([], committed)
        assert torch.allclose(st.draft_ctx, hidden)


def test_a_finished_request_keeps_its_draft_context_when_its_row_is_reused():
    eng = _engine(gamma=3, pool_size=1)
    eng.generate(_requests(1, max_new=7))
    eng.generate([Request(1, (4, 5, 6), SamplingParams(max_new_tokens=5))])  # takes the same pool row
    for rid in (0, 1):
        st = eng.state_of(rid)
        assert torch.equal(st.draft_ctx, TARGET.forward([], st.cache_tokens)[1])


def test_a_lower_precision_handoff_widens_and_decodes_like_any_other():
    import dataclasses

    reqs = _requests(2, max_new=8)
    handoffs = _engine(gamma=3).prefill_for_handoff(reqs)
    handoffs[0] = dataclasses.replace(handoffs[0], kv_hiddens=handoffs[0].kv_hiddens.to(torch.float32))
    eng = _engine(gamma=3)
    eng.accept_handoff(handoffs)
    eng.run_to_completion()
    for r in reqs:  # greedy decoding is lossless whatever the drafter's context precision
        assert eng.done[r.rid].output == [handoffs[r.rid].first_token] + target_greedy_decode(
            TARGET, list(r.prompt) + [handoffs[r.rid].first_token], 7)


def test_draft_context_pool_writes_the_committed_columns_only():
    pool = DraftContextPool(3, 6, 2)
    pool.load(1, torch.ones(2, 2, dtype=torch.float64))
    pool.load(2, torch.zeros(0, 2, dtype=torch.float64))
    hidden = torch.arange(12, dtype=torch.float64).reshape(2, 3, 2)
    pool.append(torch.tensor([2, 1]), hidden, torch.tensor([1, 3]))
    assert pool.context(2).tolist() == [[0.0, 1.0]]
    assert pool.context(1).tolist() == [[1.0, 1.0], [1.0, 1.0], [6.0, 7.0], [8.0, 9.0], [10.0, 11.0]]
    assert pool.batch(torch.tensor([0, 1])).last_rows().tolist() == [[0.0, 0.0], [10.0, 11.0]]  # row 0: empty
    with pytest.raises(ValueError, match="counts"):  # row 1 holds 5 of 6
        pool.append(torch.tensor([2, 1]), hidden, torch.tensor([1, 2]))
    assert pool.lens.tolist() == [0, 5, 1]  # nothing written
    with pytest.raises(ValueError, match=r"hiddens: expected \[n, 2\]"):
        pool.load(0, torch.zeros(1, 3, dtype=torch.float64))
    pool.load(0, torch.ones(1, 2, dtype=torch.float32))  # lower precision widens exactly
    assert pool.context(0).dtype == torch.float64 and pool.context(0).tolist() == [[1.0, 1.0]]


def test_sample_from_anchor_off_drafts_gamma_tokens():
    eng = _engine(gamma=3, sample_from_anchor=False)
    assert eng.proposer.query_token_num == 4
    reqs = _requests(2, max_new=8)
    out = eng.generate(reqs)
    assert all(out[r.rid] == target_greedy_decode(TARGET, r.prompt, 8) for r in reqs)


def test_demo_runs(capsys):
    from dspark import demo

    assert demo.main(["--gamma", "3", "--max-new", "8", "--bs", "2"]) == 0
    out = capsys.readouterr().out
    assert "verify_lens" in out and "plain greedy decoding of the target: True" in out


def test_counter_uniforms_are_uniform_in_the_open_interval_and_keyed_by_row():
    from dspark.sampling import counter_uniforms

    edge = counter_uniforms([0, 1, 2**63 - 1, 2**64 - 1], 4096)
    assert edge.dtype == torch.float64 and bool((edge > 0).all() and (edge < 1).all())
    # A row is a function of its key alone: the same key gives the same row whatever its companions.
    assert torch.equal(counter_uniforms([7, 3, 5], 64)[1], counter_uniforms([3], 64)[0])
    assert not torch.equal(counter_uniforms([3], 64), counter_uniforms([4], 64))
    # Keys a golden step apart (request_key's seed term is one) must not give shifted copies of one stream.
    golden = 0x9E3779B97F4A7C15
    a, b = counter_uniforms([5], 64)[0], counter_uniforms([5 + golden], 64)[0]
    assert not set(a.tolist()) & set(b.tolist())
    u = counter_uniforms(range(1000), 100).reshape(-1)  # 1e5 values over 16 bins: 6250 expected each
    counts = torch.bincount((u * 16).long(), minlength=16).double()
    assert float(((counts - 6250) ** 2 / 6250).sum()) < 50.0  # chi-square, 15 dof: p ~ 1e-5 at 50
    assert abs(float(u.mean()) - 0.5) < 0.005 and abs(float(u[:-1] @ u[1:]) / (u.numel() - 1) - 0.25) < 0.005

"""Bad inputs to the reference engine: a ValueError naming the field, at construction or admission, with state untouched."""

import pytest
import torch

from dspark import planner
from dspark.engine import DSparkConfig, DSparkEngine, Request, SamplingParams
from dspark.toy_models import ToyTarget, make_drafter

V = 8
TARGET = ToyTarget(V, seed=0)


def _engine(**cfg):
    return DSparkEngine(TARGET, make_drafter("vanilla", TARGET), DSparkConfig(**cfg))


@pytest.mark.parametrize("cfg, field", [
    (dict(gamma=0), "gamma"),
    (dict(gamma=-2), "gamma"),
    (dict(verify_mode="ragged"), "verify_mode"),
    (dict(gamma=3, min_verify_len=4, max_verify_len=3), "min_verify_len"),
    (dict(gamma=3, max_verify_len=5), "max_verify_len"),
    (dict(gamma=3, max_verify_len=0), "max_verify_len"),
    (dict(min_verify_len=-1), "min_verify_len"),
    (dict(mask_token_id=V), "mask_token_id"),
    (dict(mask_token_id=-1), "mask_token_id"),
    (dict(force_budget_frac=0.0), "force_budget_frac"),
    (dict(force_budget_frac=1.01), "force_budget_frac"),
    (dict(force_budget_frac=-0.25), "force_budget_frac"),
    (dict(sps_table={"sample_batch_tokens": [1, 2]}), "sps_table"),
    (dict(survival_eps=-1.0), "survival_eps"),
    (dict(pool_size=0), "pool_size"),
    (dict(max_context_len=0), "max_context_len"),
    (dict(capture_bs=(4, 0)), "capture_bs"),
    (dict(verify_backend="cuda"), "verify_backend"),
])
def test_invalid_config_names_the_field(cfg, field):
    with pytest.raises(ValueError, match=field):
        _engine(**cfg)


@pytest.mark.parametrize("cfg, field", [
    (dict(seed=1.5), "seed"),
    (dict(survival_eps="small"), "survival_eps"),
    (dict(capture_bs=8), "capture_bs"),
    (dict(enable_overlap="no"), "enable_overlap"),  # a string would read as True
    (dict(sample_from_anchor="no"), "sample_from_anchor"),
])
def test_config_of_the_wrong_type_names_the_field(cfg, field):
    with pytest.raises(TypeError, match=field):
        _engine(**cfg)
    with pytest.raises(TypeError, match="config"):
        DSparkEngine(TARGET, make_drafter("vanilla", TARGET), dict(cfg))


def test_an_infinite_survival_eps_is_refused():
    with pytest.raises(ValueError, match="survival_eps: must be finite"):
        _engine(survival_eps=float("inf"))


def test_triton_without_the_interpreter_is_refused_at_construction(monkeypatch):
    """A process's Triton mode is fixed when the kernels are first imported (the suite may already run them
    interpreted), so the probe stands in for a process where they were imported compiled, or Triton is absent."""
    import dspark.engine as engine_module

    monkeypatch.setattr(engine_module.verify, "triton_runs_on_cpu", lambda: False)
    with pytest.raises(ValueError, match="verify_backend: 'triton' on the CPU needs the Triton interpreter"):
        _engine(verify_backend="triton")
    _engine(verify_backend="torch")  # the probe gates only the Triton backend


def test_gamma_must_be_an_int():
    with pytest.raises(TypeError, match="gamma"):
        _engine(gamma=2.5)


def test_sps_probes_must_increase():
    with pytest.raises(ValueError, match="sample_batch_tokens"):
        _engine(sps_table=planner.SpsCostTable((8, 4), (1.0, 2.0)))


def test_drafter_vocabulary_must_match():
    with pytest.raises(ValueError, match="drafter"):
        DSparkEngine(TARGET, make_drafter("vanilla", ToyTarget(V + 1)), DSparkConfig())


@pytest.mark.parametrize("req, field", [
    (Request(0, (), SamplingParams()), "prompt"),
    (Request(0, (1, V), SamplingParams()), "prompt"),
    (Request(0, (1, -1), SamplingParams()), "prompt"),
    (Request(0, (1,), SamplingParams(max_new_tokens=0)), "max_new_tokens"),
    (Request(0, (1,), SamplingParams(temperature=-1.0)), "temperature"),
    (Request(0, (1,), SamplingParams(eos_id=V)), "eos_id"),
    (Request(0, (1,) * 40, SamplingParams(max_new_tokens=20)), "prompt"),  # longer than its pool slot
])
def test_invalid_request_names_the_field_and_admits_nothing(req, field):
    eng = _engine(gamma=3, max_context_len=64)
    with pytest.raises(ValueError, match=field):
        eng.prefill([Request(1, (2, 3), SamplingParams()), req])
    assert eng.batch is None and eng.rows == [] and len(eng.free_rows) == eng.config.pool_size


@pytest.mark.parametrize("req, error, field", [
    ((0, (1,)), TypeError, r"requests\[1\]: expected a Request"),
    (Request("a", (1,)), TypeError, r"requests\[1\].rid"),
    (Request(0, torch.tensor([1, 2])), TypeError, "prompt"),
    (Request(0, (1,), None), TypeError, "params"),
    (Request(0, (1,), SamplingParams(temperature="hot")), TypeError, "temperature"),
    (Request(0, (1,), SamplingParams(temperature=float("inf"))), ValueError, "temperature"),
    (Request(0, (1,), SamplingParams(temperature=1.0, top_k=2.5)), TypeError, "top_k"),
    (Request(0, (1,), SamplingParams(temperature=1.0, top_k=-3)), ValueError, "top_k"),
    (Request(0, (1,), SamplingParams(temperature=1.0, top_p="all")), TypeError, "top_p"),
    (Request(0, (1,), SamplingParams(eos_id=1.5)), TypeError, "eos_id"),
    (Request(0, (1,), SamplingParams(eos_id=True)), TypeError, "eos_id"),  # not token 1
])
def test_a_request_field_of_the_wrong_kind_is_refused_before_admission(req, error, field):
    """Each of these once passed admission and failed later, inside a step its companions shared."""
    eng = _engine(gamma=3)
    with pytest.raises(error, match=field):
        eng.prefill([Request(1, (2, 3), SamplingParams()), req])
    assert eng.batch is None and eng.done == {} and len(eng.free_rows) == eng.config.pool_size


def test_a_temperature_below_sglangs_epsilon_samples_as_greedy():
    """SGLang treats 0 <= T < 1e-6 as greedy; dividing the logits by such a T overflowed to NaN laws."""
    reqs = [Request(0, (1, 2), SamplingParams(temperature=1e-310, max_new_tokens=9))]
    assert _engine(gamma=3).generate(reqs)[0] == _engine(gamma=3).generate([Request(0, (1, 2), SamplingParams(
        max_new_tokens=9))])[0]


def test_requests_may_come_from_a_generator():
    reqs = [Request(i, (i, 2), SamplingParams(max_new_tokens=4)) for i in range(2)]
    assert _engine().generate(r for r in reqs) == _engine().generate(reqs)


def test_bad_arguments_to_the_loop_are_refused_before_a_step():
    eng = _engine()
    eng.prefill([Request(0, (1, 2), SamplingParams(max_new_tokens=8))])
    with pytest.raises(TypeError, match="progress"):
        eng.run_to_completion(progress=5)
    with pytest.raises(TypeError, match="max_steps"):
        eng.run_to_completion(max_steps="3")
    with pytest.raises(TypeError, match="progress"):
        eng.generate([Request(1, (1,), SamplingParams())], progress="bar")
    with pytest.raises(TypeError, match="on"):
        eng.set_overlap("false")  # a string would switch overlap on
    assert eng.records == [] and [st.rid for st in eng.rows] == [0] and not eng.enable_overlap
    with pytest.raises(ValueError, match="rid"):
        eng.state_of(7)


def test_request_id_in_use():
    eng = _engine()
    eng.prefill([Request(3, (1, 2), SamplingParams(max_new_tokens=4))])
    with pytest.raises(ValueError, match="rid"):
        eng.prefill([Request(3, (1,), SamplingParams())])


def test_request_ids_distinct_within_one_call():
    with pytest.raises(ValueError, match="rid"):
        _engine().prefill([Request(1, (1,), SamplingParams()), Request(1, (2,), SamplingParams())])


def test_pool_exhaustion():
    eng = _engine(pool_size=2)
    with pytest.raises(RuntimeError, match="pool_size"):
        eng.prefill([Request(i, (1, 2), SamplingParams(max_new_tokens=5)) for i in range(3)])


def test_step_without_requests_and_unknown_abort():
    eng = _engine()
    with pytest.raises(RuntimeError, match="no live request"):
        eng.step()
    with pytest.raises(ValueError, match="rid"):
        eng.abort(7)


def test_a_step_whose_relay_was_not_published_raises_with_a_strict_relay():
    """Overlap on: step N+1 reads what step N published; a consumed (stale) relay row must not be read again."""
    eng = _engine(enable_overlap=True)
    eng.future_map.strict = True  # the developer's setting; contract runs keep it off, as SGLang outside CI
    eng.prefill([Request(0, (1, 2), SamplingParams(max_new_tokens=8))])
    eng.step()
    eng.future_map.resolve_seq_lens(eng.batch)  # someone consumed step 1's publish
    with pytest.raises(RuntimeError, match="stale relay"):
        eng.step()


def test_handoff_without_overlap_relay_raises_on_a_non_future_map():
    eng = _engine(enable_overlap=True)
    eng.future_map = object()
    with pytest.raises(TypeError, match="future_map"):
        eng.accept_handoff(_engine().prefill_for_handoff([Request(0, (1, 2), SamplingParams(max_new_tokens=4))]))


def test_verify_lens_are_checked_by_the_layout():
    with pytest.raises(TypeError, match="verify_lens"):
        planner.RaggedVerifyLayout.from_lens(torch.tensor([1.0]), 4)


def test_runtime_budget_fraction_update_is_validated():
    eng = _engine()
    eng.update_internal_state(dspark_force_budget_frac=0.5)
    assert eng.config.force_budget_frac == 0.5
    for bad in (0.0, 2.0, "half"):
        with pytest.raises(ValueError, match="force_budget_frac"):
            eng.update_internal_state(dspark_force_budget_frac=bad)
    assert eng.config.force_budget_frac == 0.5
    eng.update_internal_state(dspark_force_budget_frac=None)
    assert eng.config.force_budget_frac is None


def test_engine_does_not_change_the_callers_config():
    cfg = DSparkConfig(gamma=3)
    DSparkEngine(TARGET, make_drafter("vanilla", TARGET), cfg)
    assert cfg.max_verify_len is None and cfg.mask_token_id is None  # defaults filled on the engine's own copy
    small = ToyTarget(4, seed=0)
    DSparkEngine(small, make_drafter("vanilla", small), cfg)  # the same config serves another vocabulary


@pytest.mark.parametrize("change, field", [
    (dict(first_token=V), "first_token"),
    (dict(first_token=-1), "first_token"),
    (dict(kv_hiddens=None), "kv_hiddens"),
    (dict(kv_hiddens=torch.zeros(2, 3, dtype=torch.float64)), r"kv_hiddens: expected \[n, 8\]"),
    (dict(committed_len=3, kv_tokens=(3, 4, 0), kv_hiddens=torch.zeros(3, 8, dtype=torch.float64)), "committed_len"),
    (dict(committed_len=-1), "committed_len"),
    (dict(kv_tokens=(3, 5)), "kv_tokens"),  # the KV holds the prompt (3, 4)
    (dict(kv_hiddens=torch.full((2, 8), float("nan"), dtype=torch.float64)), "kv_hiddens: holds NaN"),
])
def test_bad_handoff_names_the_field_and_admits_nothing(change, field):
    import dataclasses

    prefill, decode = _engine(gamma=3), _engine(gamma=3)
    good, other = prefill.prefill_for_handoff([Request(0, (1, 2), SamplingParams(max_new_tokens=4)),
                                               Request(1, (3, 4), SamplingParams(max_new_tokens=4))])
    free, generations = list(decode.free_rows), decode.pool.req_generation.clone()
    with pytest.raises(ValueError, match=field):
        decode.accept_handoff([good, dataclasses.replace(other, **change)])
    assert decode.free_rows == free and decode.live == [] and decode.done == {}
    assert torch.equal(decode.pool.req_generation, generations)

"""DeepSpec with its confidence head truncating proposals (the evaluator's --confidence_threshold > 0), held to the
step contracts whose statements still apply, and a look-ahead truncation (Appendix A's bias) re-inserted and caught.

`check` runs the pack at threshold 0, the evaluator's default (every proposal is the whole block). With a threshold
on, a static step verifies the truncated proposal: the adapter declares step.self-truncating, so LOOP-003 holds it to
1 <= L <= gamma+1, and these tests run the step contracts on `DeepSpecAdapter(confidence_threshold=0.5)`. Skipped
where DeepSpec or transformers 5.10.2 is not importable.
"""

import pytest

from contracts.adapters.deepspec import env as deepspec_env
from contracts.adapters.deepspec.corrections import correct_loop_bound
from contracts.boundary.engine import EngineSpec, RequestSpec
from contracts.registry import all_contracts
from contracts.runner import run_contract
from contracts.violation import is_engine_crash
from tests.caught import violation_with

pytestmark = pytest.mark.skipif(deepspec_env.deepspec_unavailable_reason() is not None,
                                reason=str(deepspec_env.deepspec_unavailable_reason()))

THRESHOLD = 0.5


@pytest.fixture(scope="module")
def truncating_engine(deepspec_engine):  # the session fixture skips without DeepSpec
    from contracts.adapters.deepspec import DeepSpecAdapter

    engine = DeepSpecAdapter(confidence_threshold=THRESHOLD)
    engine.engine_spec = deepspec_engine.engine_spec  # repro lines name the pack as it was loaded
    return engine


def test_the_confidence_head_truncates(truncating_engine):
    """The configuration DIST-001 samples (vocabulary 4, gamma 3, model seed 5): proposals of every length occur."""
    handle = truncating_engine.new_engine(EngineSpec(vocab_size=4, gamma=3, drafter="vanilla", seed=1, model_seed=5))
    truncating_engine.add_requests(handle, [RequestSpec(i, (1, 2), 1.0, 6) for i in range(40)], "local")
    lens = set()
    while any(v.live for v in truncating_engine.request_views(handle)):
        lens.update(truncating_engine.step(handle).verify_lens)
    assert lens == {1, 2, 3, 4}, lens


@pytest.mark.parametrize("contract_id", ["DIST-001", "DIST-002", "LOOP-001", "LOOP-005", "LOOP-008"])
def test_truncating_engine_keeps_the_contracts(truncating_engine, contract_id):
    run_contract(all_contracts()[contract_id], truncating_engine, profile="ci")


@pytest.mark.parametrize("contract_id", ["LOOP-002", "LOOP-003", "LOOP-004"])
def test_truncating_engine_keeps_the_bookkeeping_once_the_loop_bound_is_corrected(truncating_engine, contract_id):
    with pytest.MonkeyPatch.context() as mp:
        correct_loop_bound(mp)
        run_contract(all_contracts()[contract_id], truncating_engine, profile="ci")


def _confidence_reads_its_own_draft(mp):
    """The confidence that decides whether draft k is proposed is the drafter's own probability of draft k (a "stop
    where the drafter is unsure of what it drew" heuristic): the truncation reads the draft it cuts, the paper's
    Appendix A bias, where DeepSpec's confidence head reads only the draft before it."""
    import torch
    from deepspec.eval.dspark import draft_ops

    def predict(model, *, proposal_hidden_states, draft_input_ids, sampled_tokens, block_size):
        probs = torch.softmax(model.compute_logits(proposal_hidden_states).float(), dim=-1)
        own = probs.gather(-1, sampled_tokens[..., None])[..., 0].clamp(1e-6, 1 - 1e-6)
        return torch.log(own) - torch.log1p(-own)  # sigmoid of it is the probability of the drawn draft

    mp.setattr(draft_ops, "_predict_confidence_logits", predict)


@pytest.mark.parametrize("contract_id", ["DIST-001", "DIST-002"])
def test_anticipating_truncation_is_caught(truncating_engine, contract_id):
    contract = all_contracts()[contract_id]
    violation = violation_with(_confidence_reads_its_own_draft, contract, truncating_engine)
    assert not is_engine_crash(violation.what), str(violation)
    assert violation.contract_id == contract_id and "goodness of fit" in violation.what, str(violation)

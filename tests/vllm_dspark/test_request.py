"""The vllm-dspark pack's whole-request verify (`request.verify`, REQ-005): what it declares is what vLLM 0.33's V2
path does. min_p and logit_bias are refused at admission under speculative decoding (so undeclared); a column's
penalties read the committed output and the drafts before it; a batch with no draft takes the runner's plain
sampler. Runs only where vllm 0.33.0 is importable."""

import pytest

from contracts import protocol, request_oracle
from contracts.boundary.engine import RequestSpec
from contracts.boundary.verify import RequestVerifyCase, RequestVerifyRow


def _spec(vllm_dspark_engine, vocab=5, gamma=3):
    from contracts.adapters.vllm_dspark import runtime

    names = runtime.prepare()
    return names, runtime.Step(names, bs=1, gamma=gamma, vocab=vocab, method="standard").spec


def test_min_p_and_logit_bias_are_refused_under_speculative_decoding(vllm_dspark_engine):
    from vllm.exceptions import VLLMValidationError

    from contracts.adapters.vllm_dspark.request import admitted_params

    names, spec = _spec(vllm_dspark_engine)
    biased = RequestSpec(0, (1,), logit_bias=((1, 2.0),))
    with pytest.raises(VLLMValidationError, match="not yet supported with speculative decoding"):
        admitted_params(names, biased, 5, spec)
    admitted_params(names, biased, 5, None)  # admitted without speculation
    # A greedy request's min_p is reset to 0 by SamplingParams itself; a sampled one is refused.
    assert admitted_params(names, RequestSpec(0, (1,), min_p=0.5), 5, spec).min_p == 0.0
    with pytest.raises(VLLMValidationError, match="not yet supported with speculative decoding"):
        names.SamplingParams(temperature=1.0, min_p=0.5)._validate_spec_decode(spec)


def test_declarations(vllm_dspark_engine):
    caps = vllm_dspark_engine.capabilities
    assert {protocol.REQUEST_VERIFY, protocol.REQUEST_PENALTIES, protocol.REQUEST_MIN_NEW_TOKENS} <= caps
    assert not caps & {protocol.REQUEST, protocol.REQUEST_MIN_P, protocol.REQUEST_LOGIT_BIAS, protocol.REQUEST_STATE}
    assert protocol.exercised_parameters(caps) <= set(vllm_dspark_engine.accepted_parameters)
    assert vllm_dspark_engine.request_semantics.repetition_counts_prompt


def _emitted(engine, rows, gamma=3):
    return engine.verify_requests(RequestVerifyCase(5, gamma, tuple(rows)))


def test_a_column_reads_the_drafts_before_it(vllm_dspark_engine):
    """Token 2 is the raw argmax everywhere; drafted twice, the second is rejected only because the frequency
    penalty counts the first draft (committed output [1] holds no 2)."""
    req = RequestSpec(0, (0,), frequency_penalty=2.0)
    flat = (0, 0, 3, 2, 0)
    row = RequestVerifyRow(req, (1,), (2, 2), (flat, flat, flat))
    want = request_oracle.greedy_verify(req.prompt, row.output, row.drafts, row.logits, req,
                                        vllm_dspark_engine.request_semantics)
    assert want == [2, 3]
    assert _emitted(vllm_dspark_engine, [row]) == [want]


def test_min_tokens_masks_by_each_columns_position(vllm_dspark_engine):
    """min_tokens 3 after one output token: the EOS is masked at the first two columns, free at the third."""
    req = RequestSpec(0, (0,), eos_id=4, min_new_tokens=3)
    eos_first = (0, 1, 0, 0, 3)
    row = RequestVerifyRow(req, (1,), (1, 1, 2), (eos_first,) * 4)
    assert _emitted(vllm_dspark_engine, [row]) == [[1, 1, 4]]


def test_a_batch_without_drafts_takes_the_plain_sampler(vllm_dspark_engine, monkeypatch):
    from vllm.v1.worker.gpu.spec_decode.rejection_sampler import RejectionSampler

    def refuse(*args, **kwargs):
        raise AssertionError("the runner samples a batch with no draft with its Sampler")

    monkeypatch.setattr(RejectionSampler, "__call__", refuse)
    req = RequestSpec(0, (1,), repetition_penalty=2.0)
    row = RequestVerifyRow(req, (1,), (), ((0, 4, 0, 3, 0),))  # token 1 seen: 4 / 2 < 3, so 3 (raw argmax 1)
    assert _emitted(vllm_dspark_engine, [row, row]) == [[3], [3]]

"""The whole-request oracle from first principles, and the load-time check of a pack's accepted parameters."""

import math

import pytest
import torch

from contracts import request_oracle
from contracts.adapters.reference import ReferenceAdapter
from contracts.boundary.engine import RequestSemantics, RequestSpec
from contracts.validation import validate_adapter

pytestmark = pytest.mark.cpu

LOGITS = torch.tensor([2.0, 1.0, 0.5, -1.0], dtype=torch.float64)


def test_penalties_read_the_output_in_sglangs_order():
    r = RequestSpec(0, (3,), frequency_penalty=0.5, presence_penalty=0.25, repetition_penalty=2.0)
    x = request_oracle.processed_logits(LOGITS, r.prompt, [0, 0, 3], r)
    # token 0: (2 - 2*0.5 - 0.25) / 2; token 3: (-1 - 0.5 - 0.25) * 2; the prompt's token 3 alone would not count
    assert x.tolist() == [0.375, 1.0, 0.5, -3.5]
    vllm = RequestSemantics(repetition_counts_prompt=True, repetition_before_additive=True)
    y = request_oracle.processed_logits(LOGITS, r.prompt, [0], r, vllm)
    assert y.tolist() == [2.0 / 2 - 0.75, 1.0, 0.5, -2.0]


def test_min_new_tokens_masks_eos_and_stop_ids_until_reached():
    r = RequestSpec(0, (1,), eos_id=0, stop_token_ids=(2,), min_new_tokens=2, ignore_eos=True)
    early = request_oracle.processed_logits(LOGITS, r.prompt, [1], r)
    assert math.isinf(early[0]) and math.isinf(early[2]) and early[1] == 1.0
    assert torch.equal(request_oracle.processed_logits(LOGITS, r.prompt, [1, 1], r), LOGITS)


def test_min_p_keeps_tokens_at_least_that_fraction_of_the_likeliest():
    r = RequestSpec(0, (1,), temperature=1.0, min_p=0.5)
    p = torch.softmax(LOGITS, -1)
    kept = torch.where(p >= 0.5 * p.max(), p, 0.0)
    assert torch.allclose(request_oracle.next_law(LOGITS, r.prompt, [], r), kept / kept.sum(), rtol=0, atol=1e-15)


def test_stop_ids_and_the_sglang_reading_of_ignore_eos():
    r = RequestSpec(0, (1,), eos_id=0, stop_token_ids=(2,), ignore_eos=True)
    assert request_oracle.stop_ids(r) == {2}
    assert request_oracle.stop_ids(r, RequestSemantics(ignore_eos_ignores_stop_ids=True)) == frozenset()


def test_output_law_is_a_law_and_greedy_follows_the_penalty():
    table = torch.tensor([[0.0, 1.0, 0.2], [1.5, 0.0, 1.0], [1.0, 0.9, 0.0]], dtype=torch.float64)

    def nxt(seq):
        return table[seq[-1]]

    r = RequestSpec(0, (0,), temperature=1.0, max_new_tokens=3, eos_id=2, frequency_penalty=1.0, min_new_tokens=1)
    law = request_oracle.output_law(nxt, r)
    assert abs(sum(law.values()) - 1.0) < 1e-12
    assert all(seq[0] != 2 for seq in law)  # min_new_tokens: the first token is never the EOS
    assert all(len(seq) == 3 or seq[-1] == 2 for seq in law)
    # Greedy: 0 -> 1 -> 0 -> then 0's best (1) is penalised by 1 and 2 (0.2) is not, so 1 - 1 = 0 < 0.2: 2 ends it
    g = RequestSpec(0, (0,), max_new_tokens=5, eos_id=2, frequency_penalty=1.0)
    assert request_oracle.plain_greedy(nxt, g) == [1, 0, 2]


def test_a_pack_that_exercises_a_parameter_its_engine_does_not_accept_fails_at_load():
    class Narrow(ReferenceAdapter):
        accepted_parameters = ("temperature", "top_k", "top_p", "max_new_tokens", "eos_id", "min_p")

    with pytest.raises(ValueError, match=r"^accepted_parameters: the capabilities exercise frequency_penalty"):
        validate_adapter(Narrow())

    class Unknown(ReferenceAdapter):
        accepted_parameters = ReferenceAdapter.accepted_parameters + ("beam_width",)

    with pytest.raises(ValueError, match=r"^accepted_parameters: unknown 'beam_width'"):
        validate_adapter(Unknown())


def test_a_family_parameter_the_engine_refuses_is_never_drawn():
    """A stop list without ignore_eos (DeepSpec's) loads, its report gap omits ignore_eos, and no drawn request sets
    it; the family's other parameter is still drawn."""
    from hypothesis import given, settings

    from contracts.protocol import REQUEST_STOP_TOKENS, exercised_parameters
    from contracts.strategies.request import request_loop_cases

    class StopList(ReferenceAdapter):
        accepted_parameters = tuple(p for p in ReferenceAdapter.accepted_parameters if p != "ignore_eos")

    engine = StopList()
    validate_adapter(engine)
    exercised = exercised_parameters(engine.capabilities, engine.accepted_parameters)
    assert "stop_token_ids" in exercised and "ignore_eos" not in exercised
    assert "ignore_eos" in exercised_parameters(engine.capabilities)
    assert REQUEST_STOP_TOKENS in engine.capabilities
    stops = []

    @settings(max_examples=200, database=None, derandomize=True)
    @given(request_loop_cases(engine=engine))
    def run(case):
        assert not any(r.ignore_eos for r in case.requests)
        stops.extend(r.stop_token_ids for r in case.requests)

    run()
    assert any(stops)

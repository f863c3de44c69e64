"""Whole requests on DeepSpec: what its generation path accepts (contracts/adapters/deepspec/params.py), and its stop
list held to REQ-001.

DeepSpec takes no whole-request family but its stop list: `generate_decoding_sample(stop_token_ids=...)`, every EOS id
of the model (Qwen3's generation config lists two). The pack declares request.stop-tokens; ignore_eos, which DeepSpec
has no switch for, is never drawn. REQ-001 runs DeepSpec's multi-id stop handling (the verify's cut at the first
accepted stop id, the loop's check of a round's new tokens, the final trim) against plain greedy decoding, and a stop
list read as its first id alone is caught. Skipped where DeepSpec or transformers 5.10.2 is not importable.
"""

import pytest

from contracts.adapters.deepspec import env as deepspec_env
from contracts.adapters.deepspec.corrections import correct_loop_bound
from contracts.adapters.deepspec.params import ACCEPTED_PARAMETERS
from contracts.boundary.engine import EngineSpec, RequestSpec
from contracts.registry import all_contracts
from contracts.runner import run_contract
from contracts.violation import is_engine_crash
from tests.caught import violation_with

pytestmark = pytest.mark.skipif(deepspec_env.deepspec_unavailable_reason() is not None,
                                reason=str(deepspec_env.deepspec_unavailable_reason()))


def test_accepted_parameters_are_the_engines(deepspec_engine):
    """What the pack lists is what DeepSpec takes; the core admits it though the step level draws top_k and top_p,
    which DeepSpec has not (the step machine's knobs are mapped as each engine allows)."""
    from contracts.validation import _check_parameters

    caps = deepspec_engine.capabilities
    assert deepspec_engine.accepted_parameters == ACCEPTED_PARAMETERS
    assert not {"top_k", "top_p", "ignore_eos", "min_p", "logit_bias", "min_new_tokens"} & set(ACCEPTED_PARAMETERS)
    _check_parameters(deepspec_engine, caps)


@pytest.mark.parametrize("field, value", [("frequency_penalty", 1.0), ("presence_penalty", -0.5),
                                          ("repetition_penalty", 1.5), ("min_new_tokens", 2), ("min_p", 0.1),
                                          ("logit_bias", ((1, 2.0),))])
def test_parameters_deepspec_lacks_are_refused(deepspec_engine, field, value):
    handle = deepspec_engine.new_engine(EngineSpec(vocab_size=4, gamma=2, drafter="vanilla"))
    with pytest.raises(ValueError, match=f"^{field}: DeepSpec's generation path takes no {field}"):
        deepspec_engine.add_requests(handle, [RequestSpec(0, (1, 2), **{field: value})], "local")


def test_stop_list_reaches_deepspec(deepspec_engine):
    """EOS and stop ids are one list, in DeepSpec's own order; ignore_eos drops the EOS; an empty list is None."""
    from contracts.adapters.deepspec.step import _stop_token_ids

    assert _stop_token_ids(RequestSpec(0, (1,), eos_id=2, stop_token_ids=(3, 2))) == [2, 3]
    assert _stop_token_ids(RequestSpec(0, (1,), eos_id=2, stop_token_ids=(3,), ignore_eos=True)) == [3]
    assert _stop_token_ids(RequestSpec(0, (1,), eos_id=2, ignore_eos=True)) is None
    assert _stop_token_ids(RequestSpec(0, (1,))) is None


def test_greedy_requests_with_stop_lists_are_plain_decoding(deepspec_engine):
    run_contract(all_contracts()["REQ-001"], deepspec_engine, profile="ci")


def _first_stop_id_only(mp):
    """The stop list read as one id (its first: a multi-id `eos_token_id` taken as `eos_token_id[0]`) by the verify,
    the loop and the final trim: a request runs past its other stop ids."""
    from deepspec.eval import base_evaluator as be

    correct_loop_bound(mp)
    verify, has_stop, trim = be.verify_draft_tokens, be.has_stop_token, be.trim_output_ids

    def first(ids):
        return ids[:1] if ids else ids

    mp.setattr(be, "verify_draft_tokens", lambda **kw: verify(**{**kw, "stop_token_ids": first(kw["stop_token_ids"])}))
    mp.setattr(be, "has_stop_token", lambda token_ids, stop_token_ids: has_stop(token_ids, first(stop_token_ids)))
    mp.setattr(be, "trim_output_ids", lambda out, n, stop_token_ids: trim(out, n, first(stop_token_ids)))


def test_stop_list_read_as_its_first_id_is_caught(deepspec_engine):
    contract = all_contracts()["REQ-001"]
    violation = violation_with(_first_stop_id_only, contract, deepspec_engine)
    assert not is_engine_crash(violation.what), str(violation)
    assert violation.contract_id == "REQ-001" and "tokens" in violation.what, str(violation)
    contract.check(deepspec_engine, violation.case)  # the intact engine passes the shrunk case

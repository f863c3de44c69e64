"""Realistic speculative-decoding bugs, put back into DeepSpec's own functions, are caught by the contracts.

Runs only where DeepSpec and transformers 5.10.2 are importable (`bash scripts/install_deepspec.sh` in its venv);
elsewhere every test here skips. Each case patches DeepSpec itself (never the adapter) to re-create a bug of a class
the contracts state, runs the matching contract against the deepspec adapter at the check's settings, and checks
that the violation is the contract's own (not an engine crash), names the contract and engine, carries a shrunk case
and replays there. Step-level bugs go in on top of the correction of DeepSpec's loop bound (ledger: an unmodified
DeepSpec fails LOOP-002/004 on it), so what is caught is the inserted bug.
"""

import pytest
import torch

from contracts.adapters.deepspec import env as deepspec_env
from contracts.adapters.deepspec.corrections import correct_loop_bound
from contracts.engines import engine_label, engine_spec
from contracts.registry import all_contracts
from contracts.runner import run_contract
from contracts.violation import is_engine_crash
from tests.caught import assert_caught, violation_with

pytestmark = pytest.mark.skipif(deepspec_env.deepspec_unavailable_reason() is not None,
                                reason=str(deepspec_env.deepspec_unavailable_reason()))


def _assert_caught(violation, contract, engine) -> None:
    """tests.caught.assert_caught, for an engine loaded by module:factory as well as by its entry point name (its
    violations and repro lines then carry the spec)."""
    if engine_spec(engine) == engine.name:
        assert_caught(violation, contract, engine)
        return
    assert not is_engine_crash(violation.what), f"caught by an engine exception, not by the contract: {violation}"
    assert violation.contract_id == contract.id and violation.engine == engine_label(engine), str(violation)
    assert engine_spec(engine) in violation.repro, violation.repro
    if contract.cases is not None:
        assert violation.case is not None
        contract.check(engine, violation.case)


def _residual_from_target(mp):
    """After a rejection the replacement is drawn from the target row p, not the residual max(p - q, 0)."""
    from deepspec.eval import base_evaluator as be

    mp.setattr(be, "sample_residual",
               lambda target_probs, draft_probs: be.sample_from_probs(target_probs.unsqueeze(1)).squeeze(1))


def _temperature_ignored(mp):
    """The verify's target law is softmax(logits) whatever the temperature (greedy kept): the accept compares the
    drafts against the wrong law at T != 1."""
    from deepspec.eval import base_evaluator as be

    real = be.logits_to_probs
    mp.setattr(be, "logits_to_probs", lambda logits, temperature: real(logits, 1.0 if temperature >= 1e-5 else temperature))


def _greedy_ties_to_last(mp):
    """Greedy (temperature 0) picks the LAST maximal logit, not the first: ties break to the highest id."""
    from deepspec.eval import base_evaluator as be

    real = be.logits_to_probs

    def probs(logits, temperature):
        if temperature >= 1e-5:
            return real(logits, temperature)
        flipped = torch.flip(logits, dims=[-1])
        idx = logits.shape[-1] - 1 - torch.argmax(flipped, dim=-1, keepdim=True)
        return torch.zeros_like(logits, dtype=torch.float32).scatter_(-1, idx, 1.0)

    mp.setattr(be, "logits_to_probs", probs)


def _draft_sampled_at_t1(mp):
    """DeepSpec #31's class: the drafter draws its tokens from one law (here softmax(logits), temperature ignored)
    while the verify scores them with another (softmax(logits / T)), so sampled outputs leave the target's law."""
    from deepspec.modeling.dspark import markov_head
    from deepspec.modeling.dspark.qwen3 import modeling
    from deepspec.utils import sampling

    real = sampling.sample_tokens
    correct_loop_bound(mp)
    for module in (markov_head, modeling):
        mp.setattr(module, "sample_tokens",
                   lambda logits, temperature=0.0: real(logits, 1.0 if temperature >= 1e-5 else temperature))


def _bonus_stop_ignored(mp):
    """A stop token among a round's new tokens no longer ends the loop (only an accepted draft's stop does): the
    final trim still cuts the output at the stop, so the rounds after it are wasted and emit nothing."""
    from deepspec.eval import base_evaluator as be

    correct_loop_bound(mp)
    mp.setattr(be, "has_stop_token", lambda token_ids, stop_token_ids: False)


def _target_cache_not_rolled_back(mp):
    """The target's KV cache is not cropped after a verify: the rejected drafts' keys and values stay in it, so the
    next round's target reads a context that was never committed."""
    from deepspec.eval import base_evaluator as be

    correct_loop_bound(mp)

    class NoCropCache(be.DynamicCache):
        def crop(self, max_length):
            return None

    mp.setattr(be, "DynamicCache", NoCropCache)  # the loop's target cache only: the drafter's comes from evaluator.py


def _context_features_one_column_late(mp):
    """`_update` hands the drafter the verify's features from column 1 on (the first draft's where the anchor's
    belongs): the right count, so the drafter's context length (LOOP-002) holds, every feature one position late.
    Outputs stay lossless; only the drafts get worse, which no output contract sees."""
    from deepspec.eval.dspark.evaluator import Qwen3DSparkEvaluator
    from deepspec.modeling.dspark.common import extract_context_feature

    correct_loop_bound(mp)

    def update(self, context, verification):
        features = extract_context_feature(verification.target_output.hidden_states, self.draft_model.target_layer_ids)
        n = verification.accepted_draft_tokens + 1
        context.target_hidden_states = features[:, 1:n + 1] if features.shape[1] > n else features[:, :n]

    mp.setattr(Qwen3DSparkEvaluator, "_update", update)


BUGS = [
    ("residual drawn from the target", _residual_from_target, ("LOSSLESS-003",)),
    ("verify ignores the temperature", _temperature_ignored, ("LOSSLESS-005",)),
    ("greedy ties to the highest id", _greedy_ties_to_last, ("VERIFY-003",)),
    ("drafts drawn from another law than q (#31's class)", _draft_sampled_at_t1, ("DIST-001", "DIST-002", "DRAFT-004")),
    ("a stop token in the bonus is ignored", _bonus_stop_ignored, ("LOOP-002",)),
    ("target KV cache not rolled back after a rejection", _target_cache_not_rolled_back, ("LOOP-001", "LOOP-002")),
    ("draft context fed each feature one position late", _context_features_one_column_late, ("LOOP-008",)),
]


@pytest.mark.parametrize("patch, contract_id",
                         [pytest.param(p, cid, id=f"{cid}-{name}") for name, p, ids in BUGS for cid in ids])
def test_reinserted_bug_is_caught(deepspec_engine, patch, contract_id):
    contract = all_contracts()[contract_id]
    violation = violation_with(patch, contract, deepspec_engine)
    with pytest.MonkeyPatch.context() as mp:  # the intact engine (its ledger finding corrected) passes again
        correct_loop_bound(mp)
        _assert_caught(violation, contract, deepspec_engine)
        if contract.cases is None:  # a fixed-scenario contract: no case to shrink, the whole contract passes
            run_contract(contract, deepspec_engine, profile="ci")

"""Precision of SGLang's known-failures ledger: no entry hides another bug of its contract.

For every entry of the sglang packs (sglang, sglang-chain, sglang-pd), a second bug, different from the entry's
cause, is put back into SGLang's own code and the contract is run as `check` runs it (`run_with_ledger`): the run
must fail with a ContractViolation, never be reported as the known failure. Where the entry is a finding with a
correction, the bug must survive that correction (it sits in code the correction does not replace), so the
violation is either outside the entry's pattern or caught by the re-run with every known correction applied; a
hardening or by-design entry has no correction, so its pattern alone must leave the bug's symptom out.
Runs only where sglang 0.5.23 is installed.
"""

import math

import pytest
import torch

from contracts.adapters.sglang import env as sglang_env
from contracts.engines import load_engine
from tests.ledger_precision import assert_the_run_fails, ci_profile  # noqa: F401 (a fixture)
from tests.sglang.test_relay_finding import _carry_without_generation

pytestmark = pytest.mark.skipif(sglang_env.sglang_unavailable_reason() is not None,
                                reason=str(sglang_env.sglang_unavailable_reason()))


def _mixed_select_reads_compacted_greedy_rows(mp):
    """The mixed select reads the greedy accept as if compacted to the greedy rows (greedy_len[greedy_mask]) while
    the greedy kernel gives one entry per batch row: a batch with two greedy rows among more fails to select.
    VERIFY-016's sglang entry (by design) covers every sampled-row field of the contract, so a failure of the mixed
    call is what the contract can still report on sglang."""
    from sglang.kernels.ops.speculative.dspark import dspark_accept

    real = dspark_accept.select_mixed_accept

    def select(*, greedy_mask, greedy_len, greedy_bonus, greedy_trim, **kw):
        keep = greedy_mask.to(torch.bool)
        return real(greedy_mask=greedy_mask, greedy_len=greedy_len[keep], greedy_bonus=greedy_bonus[keep],
                    greedy_trim=greedy_trim[keep], **kw)

    mp.setattr(dspark_accept, "select_mixed_accept", select)


def _reserve_counts_the_lag_twice(mp):
    """The decode reserve with the overlap lag's window added on top of the 2T that already holds it (3T): a
    request near its context limit reserves past its row, at every page size the row's headroom does not cover."""
    from sglang.srt.speculative import dflash_info_v2

    real = dflash_info_v2.page_aligned_decode_alloc_lens
    mp.setattr(dflash_info_v2, "page_aligned_decode_alloc_lens",
               lambda reqs, *, reserve, page_size: real(reqs, reserve=reserve * 3 // 2, page_size=page_size))


def _forced_budget_rounded_up(mp):
    """A forced budget fraction resolved with ceil, not floor: the layout may spend one cell past f * bs * gamma."""
    from sglang.srt.speculative.dspark_components.dspark_planner import HostConfidenceBudgetPlanner, VerifyBudgetDecision

    real = HostConfidenceBudgetPlanner.compute_budget

    def compute_budget(self, **kw):
        budget = real(self, **kw)
        if self.forced_budget_frac is None:
            return budget
        full = int(kw["confidence"][:, : self.cfg.resolved_max_verify_len()].numel())
        budget = max(0, math.ceil(float(self.forced_budget_frac) * full))
        self.last_decision = VerifyBudgetDecision(budget=budget)
        return budget

    mp.setattr(HostConfidenceBudgetPlanner, "compute_budget", compute_budget)


def _candidates_wrapped_into_the_vocabulary(mp):
    """Draft ids taken modulo V where a range check belongs: the id V becomes 0, which the next position's target
    favours, so the greedy accept takes it (the hardening entries are the sampled accept's symptoms)."""
    from sglang.srt.speculative.dspark_components import dspark_verify

    real = dspark_verify.accept_draft_tokens

    def accept(*, candidates, target_logits, **kw):
        return real(candidates=candidates % target_logits.shape[-1], target_logits=target_logits, **kw)

    mp.setattr(dspark_verify, "accept_draft_tokens", accept)


def _verify_drops_the_logit_bias(mp):
    """The verify's logit adjustments skip the request's logit bias (plain decoding's sampler applies it): a bias
    that moves the argmax or the law is lost from the second token on. It sits in the adjustment every correction of
    the REQ findings still calls."""
    from sglang.srt.speculative import dflash_utils, dflash_worker_v2
    from sglang.srt.speculative.dspark_components import dspark_planner, dspark_verify

    real = dflash_utils.apply_dflash_verify_logits_adjustments

    def adjust(*, sampling_info, **kw):
        bias = getattr(sampling_info, "logit_bias", None)
        if bias is None:
            return real(sampling_info=sampling_info, **kw)
        sampling_info.logit_bias = None
        try:
            return real(sampling_info=sampling_info, **kw)
        finally:
            sampling_info.logit_bias = bias

    for module in (dflash_utils, dflash_worker_v2, dspark_planner, dspark_verify):  # each imports it by name
        mp.setattr(module, "apply_dflash_verify_logits_adjustments", adjust)


def _accept_law_at_temperature_one(mp):
    """The sampled accept builds its target law at temperature 1 (the requests' temperatures not handed to it), on
    either path (plain softmax or the top-k/top-p build). It sits under the min_p correction, which wraps the same
    accept core."""
    from sglang.kernels.ops.speculative.dspark import dspark_accept

    real = dspark_accept._accept_sampling_core

    def core(*, sampling_info, **kw):
        saved = sampling_info.temperatures
        sampling_info.temperatures = torch.ones_like(saved)
        try:
            return real(sampling_info=sampling_info, **kw)
        finally:
            sampling_info.temperatures = saved

    mp.setattr(dspark_accept, "_accept_sampling_core", core)


def _frequency_penalizer_required_by_presence(mp):
    """A copy-paste slip: the frequency penalizer is required only when a request sets a presence penalty, so a
    request with a frequency penalty alone is never prepared and nothing counts its tokens (the correction of
    REQ-004 feeds prepared penalizers only, so the state stays empty with it too)."""
    from sglang.srt.sampling.penaltylib.frequency_penalty import BatchedFrequencyPenalizer

    mp.setattr(BatchedFrequencyPenalizer, "_is_required",
               lambda self: any(r.sampling_params.presence_penalty != 0.0 for r in self.orchestrator.reqs()))


# (engine, contract, a marker found in the entry's field or observed pattern, the second bug). The marker tells
# apart the entries of one contract; every entry of the packs has exactly one case (checked below).
_REQ = [
    ("REQ-001", "penalty", _verify_drops_the_logit_bias),
    ("REQ-002", "penalty", _verify_drops_the_logit_bias),
    ("REQ-002", "min_p", _accept_law_at_temperature_one),
    ("REQ-003", "penalty", _verify_drops_the_logit_bias),
    ("REQ-004", "treat as seen", _frequency_penalizer_required_by_presence),
    ("REQ-005", "penalty", _verify_drops_the_logit_bias),
]
CASES = [
    ("sglang", "VERIFY-016", "sampled row", _mixed_select_reads_compacted_greedy_rows),
    ("sglang", "KV-002", "page 1", _reserve_counts_the_lag_twice),
    ("sglang", "PLAN-010", "forced fraction", _forced_budget_rounded_up),
    ("sglang", "LOOP-003", "budget", _forced_budget_rounded_up),
    ("sglang", "RELAY-001", "survival", _carry_without_generation),
    ("sglang", "RELAY-002", "before it joined", _carry_without_generation),
    ("sglang-chain", "VERIFY-012", "correct_len", _candidates_wrapped_into_the_vocabulary),
    ("sglang", "VERIFY-012", "out of bounds", _candidates_wrapped_into_the_vocabulary),
    *[("sglang", c, m, b) for c, m, b in _REQ],
    *[("sglang-chain", c, m, b) for c, m, b in _REQ],
    *[("sglang-pd", c, m, b) for c, m, b in _REQ if c != "REQ-005"],  # sglang-pd declares no request.verify
]


def _marked(entry, marker: str) -> bool:
    return marker in entry.field or marker in (entry.observed or "")


def _entries():
    from contracts.adapters.sglang import SGLangAdapter, SGLangChainAdapter, SGLangPdAdapter

    return list(dict.fromkeys(e for a in (SGLangAdapter, SGLangChainAdapter, SGLangPdAdapter) for e in a.known_failures))


def _entry_of(engine, contract_id, marker):
    found = [e for e in _entries() if (e.engine, e.contract_id) == (engine, contract_id) and _marked(e, marker)]
    assert len(found) == 1, f"{engine} {contract_id} {marker!r}: {len(found)} ledger entries carry the marker"
    return found[0]


@pytest.fixture(scope="module")
def engines(sglang_engine, sglang_chain_engine):  # the session fixtures skip without SGLang
    return {"sglang": sglang_engine, "sglang-chain": sglang_chain_engine, "sglang-pd": load_engine("sglang-pd")}


@pytest.mark.parametrize("engine_name, contract_id, marker, bug", CASES,
                         ids=[f"{e}-{c}-{m.replace(' ', '_')}" for e, c, m, _ in CASES])
def test_a_second_bug_fails_the_run(engines, ci_profile,  # noqa: F811
                                     engine_name, contract_id, marker, bug):
    assert_the_run_fails(engines[engine_name], contract_id, _entry_of(engine_name, contract_id, marker), bug)


def test_every_sglang_ledger_entry_has_a_precision_case():
    """A new entry without a case here fails: each entry names exactly one case, and each case one entry."""
    cases = {(e, c, m) for e, c, m, _ in CASES}
    for entry in _entries():
        mine = [k for k in cases if k[:2] == (entry.engine, entry.contract_id) and _marked(entry, k[2])]
        assert len(mine) == 1, f"{entry.engine} {entry.contract_id} {entry.field!r}: {len(mine)} precision cases"
    for case in cases:
        _entry_of(*case)

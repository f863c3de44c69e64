"""vLLM V2 DSpark's known failures (vllm 0.33.0).

No finding on vLLM's code so far. The three entries are a policy divergence, not a bug, recorded so that the run
says it: DPPAD-003/004/005 model DP microbatching on V1's rule (a step is microbatched only when every rank's last
microbatch holds one of its real tokens: V1's `is_last_ubatch_empty` fallback, and the V2 RFC #50738 as first
written). vLLM's maintainers dropped that fallback for the V2 runner in #50945 (review: "treat the second empty ubatch
like a dummy run"): `sync_cudagraph_and_dp_padding` microbatches whenever every rank allows it and the smallest rank
reaches the threshold, pads every rank to the largest rank's count, runs empty microbatches as dummy batches, and
only drops the microbatched graph (to eager) when `2 * min(tokens) < graph size`. The contracts' expected values
follow V1 on exactly those steps; the proposed core change (a capability that selects the V2 rule in
contracts/catalog/dp_sync.py::_expected_lockstep) is in docs/engines/vllm-dspark.md.
"""

import re
from dataclasses import dataclass

from contracts.ledger import KnownFailure

_POLICY = ("evidence: policy divergence, not a bug: vLLM V2 (#50945, merged) microbatches a DP step whenever every rank "
           "allows it and min(tokens) >= the threshold, padding every rank to the largest count and running an empty "
           "last microbatch as a dummy batch (dp_utils.py:103-150); the contract's expected value follows V1's "
           "is_last_ubatch_empty fallback. Shrunk: tokens [5, 4] (rank 1 idle: dummy 1 + 3 drafts), 2 microbatches, "
           "threshold 4, graph sizes [1, 2, 4, 8, 16]: V2 runs 5 tokens per rank, microbatched, eager. Each entry "
           "matches only a step where V2's rule gives the observed value (tests/vllm_dspark/test_ledger_precision.py)")

_TOKENS = re.compile(r"\(.*\btokens \[(\d+(?:, \d+)*)\]\)$")


def _v2_microbatches(case, tokens) -> bool:
    """V2's rule (dp_utils.sync_cudagraph_and_dp_padding): every rank allows microbatching (the pack's runner exists
    when the case asks for 2 or more) and the smallest rank's tokens reach the threshold; no last-microbatch clause."""
    return case.microbatches > 1 and min(tokens) >= case.microbatch_threshold


@dataclass(frozen=True)
class V2Microbatching(KnownFailure):
    """A DPPAD entry that describes only V2's microbatching rule: beyond the field pattern, the violation's step must
    be one V2 microbatches (its forward tokens read from the field, the settings from the case) and the observed value
    what that rule gives there. Any other failure of these contracts (a graph dropped, microbatching refused, a rank
    padded, where V2's rule says otherwise) is not this entry's."""

    def matches(self, violation) -> bool:
        if not super().matches(violation):
            return False
        found, case = _TOKENS.search(violation.what), getattr(violation, "case", None)
        if found is None or case is None or not hasattr(case, "microbatch_threshold"):
            return False
        tokens = [int(t) for t in found.group(1).split(", ")]
        if not _v2_microbatches(case, tokens):
            return False
        observed = str(violation.observed)
        if self.contract_id == "DPPAD-003":  # V1 expects the graph; V2 microbatches, and no microbatched graph runs
            return observed == "False"
        if self.contract_id == "DPPAD-004":  # V1 expects no microbatching; V2 microbatches
            return observed == "True"
        if self.contract_id == "DPPAD-005":  # V1 expects no lockstep (no size covers them); V2 pads to the largest
            return observed == str(max(tokens))
        return False


def _entries(engine: str) -> tuple:
    return (V2Microbatching(engine, "==0.33.0", "DPPAD-003", r"replays a graph \(", _POLICY, observed=r"^False$"),
            V2Microbatching(engine, "==0.33.0", "DPPAD-004", r"microbatched \(", _POLICY, observed=r"^True$"),
            V2Microbatching(engine, "==0.33.0", "DPPAD-005", r"tokens run without lockstep \(", _POLICY))


KNOWN_FAILURES = _entries("vllm-dspark")
BLOCK_KNOWN_FAILURES = _entries("vllm-dspark-block")

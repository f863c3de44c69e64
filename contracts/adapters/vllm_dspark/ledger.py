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

from contracts.ledger import KnownFailure

_POLICY = ("evidence: policy divergence, not a bug: vLLM V2 (#50945, merged) microbatches a DP step whenever every rank "
           "allows it and min(tokens) >= the threshold, padding every rank to the largest count and running an empty "
           "last microbatch as a dummy batch (dp_utils.py:103-150); the contract's expected value follows V1's "
           "is_last_ubatch_empty fallback. Shrunk: tokens [5, 4] (rank 1 idle: dummy 1 + 3 drafts), 2 microbatches, "
           "threshold 4, graph sizes [1, 2, 4, 8, 16]: V2 runs 5 tokens per rank, microbatched, eager")


def _entries(engine: str) -> tuple:
    return (KnownFailure(engine, "==0.33.0", "DPPAD-003", r"replays a graph", _POLICY),
            KnownFailure(engine, "==0.33.0", "DPPAD-004", r"microbatched \(", _POLICY),
            KnownFailure(engine, "==0.33.0", "DPPAD-005", r"tokens run without lockstep", _POLICY))


KNOWN_FAILURES = _entries("vllm-dspark")
BLOCK_KNOWN_FAILURES = _entries("vllm-dspark-block")

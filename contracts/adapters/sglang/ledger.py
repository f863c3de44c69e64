"""SGLang's known failures: each one a finding on SGLang's own code, with its evidence, the correction that makes
its contract pass (tests/sglang/test_findings.py, tests/sglang/test_relay_finding.py, tests/sglang/test_cuda_relay_path.py,
tests/sglang/test_request_findings.py), and the facts a maintainer needs
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

_PLAN_010 = (
    "evidence: speculative/dspark_components/dspark_planner.DSparkVerifyPlanner.schedule_layout serves compact mode "
    "with a flat (uninitialised) SPS table from its verify-all cache (_is_verify_all, fixed at construction) before it "
    "looks at the budget, so set_forced_budget_frac (dspark_force_budget_frac) resolves a budget that the layout then "
    "ignores: every request verifies all gamma+1 tokens. Shrunk: bs 1, gamma 1, confidence 0, forced fraction 0.25 "
    "resolves budget 0 and lays out L = 2. Skipping the cache while a fraction is forced makes PLAN-010 pass "
    "(tests/sglang/test_findings.py)"
)
_PLAN_010_FINDING = Finding(
    status="known: sgl-project/sglang#32930 (fix PR, open); #38899 (issue, open) with #38897 (fix PR, open)",
    path="every DSpark platform, compact ragged verify without an SPS table under dspark_force_budget_frac (the "
         "SPS profiler's --fracs sweep): speculative/dspark_components/dspark_planner.py:381",
    severity="wasted work, and SPS profiling data measured at the wrong budget; outputs are unaffected",
    repro="findings/sglang/plan_010_forced_budget_ignored_in_compact.py",
    correction=corrections.forced_fraction_skips_verify_all_cache)

# RELAY-001 and RELAY-002 share a root (the relay's read does not carry the writer's generation): one draft report.
_RELAY_REPORT = "findings/sglang/relay_writer_generation.md"

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
        "sglang", "==0.5.23", "PLAN-010", r"^sum\(L - 1\) with forced fraction", _PLAN_010, finding=_PLAN_010_FINDING),
    # The same cause met by the decode loop: SGLang's own Scheduler in compact mode without an SPS table, a fraction
    # forced through set_internal_state; every row verifies all, past the budget it resolved.
    KnownFailure(
        "sglang", "==0.5.23", "LOOP-003", r"^budget$",
        _PLAN_010 + ". In the decode loop (LOOP-003, step.ragged): gamma 8, compact, no SPS table, forced fraction 0.5, "
        "two greedy requests: the budget is 8 and both rows verify 9 tokens (sum(L - 1) = 16)",
        finding=_PLAN_010_FINDING),
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
            repro="findings/sglang/relay_001_host_relay_current_generation.py", correction=corrections.host_relay_ring,
            report=_RELAY_REPORT),
    ),
    KnownFailure(
        "sglang", "==0.5.23", "RELAY-002",
        r"^step \d+: survival the budget read for request \d+ \(its row taken at step \d+, before it joined at step \d+\)$",
        "evidence: managers/overlap_utils.ConfidenceRelay.issue_ring_copy, on the CUDA branch (the ring), copies "
        "gen_ring[slot].copy_(self.pool.req_generation) at every publish: the pool's generation of EVERY row, not the "
        "generation of the request whose confidence the row holds (confidence_buf is rewritten only when a request "
        "publishes on the row). A PD decode server takes a request's row when its KV transfer starts "
        "(DecodePreallocQueue._pre_alloc -> DecodeReqToTokenPool.alloc, generation += 1) and the running batch keeps "
        "publishing until the request joins through build_dspark_disagg_draft_input (a publish without confidence), so "
        "each snapshot meanwhile pairs the previous occupant's confidence (or never-written torch.empty memory) with the "
        "new request's generation, and HostConfidenceBudgetPlanner's freshness check passes it. Run on this CPU through "
        "SGLang's own CUDA branch, PD decode pool and prebuilt path (contracts.adapters.sglang.relay_ring_model: the "
        "repo's stream model is its device module, so the ring copy stays pending; pinned memory is host memory). "
        "Shrunk (pinned): pool 2, gamma 2, request 0 "
        "leaves after step 1, request 2 takes its row before step 2 and joins at step 4: steps 4 and 5 read request 0's "
        "step-1 confidence (expected 1s). Rows taken at the join pass (RELAY-001 holds on the ring). Copying the writer's "
        "generation, recorded at scatter, makes RELAY-002 pass (tests/sglang/test_cuda_relay_path.py). Same root as "
        "RELAY-001: the relay's read does not carry the writer's generation",
        finding=Finding(
            status="not found (sgl-project/sglang issues and PRs searched for gen_ring, issue_ring_copy, ConfidenceRelay "
                   "with PD disaggregation, pre-allocated rows and stale confidence: see the draft report)",
            path="NVIDIA CUDA (the ring), a PD disaggregation decode server, overlap with a ragged verify mode: "
                 "managers/overlap_utils.py:245 (disaggregation/decode.py:2257 takes the row early)",
            severity="wasted work: a PD request's first one or two verify budgets are planned from another request's "
                     "or never-written confidence; outputs stay lossless",
            repro="findings/sglang/relay_002_cuda_ring_generation.py", correction=corrections.writer_generation_recorded,
            report=_RELAY_REPORT),
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


# ---- whole-request parameters under DSpark (REQ-001..004), on the step level's engines -------------------------------

_PENALTY_PARAMS = r"\b(frequency_penalty|presence_penalty|repetition_penalty|min_new_tokens)="

_NO_PENALTIES = (
    "evidence: DSpark's verify logits carry none of the request's penalties. Scheduler._forward_isolation hands the "
    "worker SamplingBatchInfo.copy_for_forward() (penalizer_orchestrator=None, the state folded into "
    "acc_additive_penalties and acc_scaling_penalties); dflash_utils.apply_dflash_verify_logits_adjustments, which "
    "TargetVerifyExecutor.run_non_compact calls, reads the nonexistent acc_linear_penalties (so the additive "
    "penalties and the min_new_tokens mask are dropped), never reads acc_scaling_penalties (repetition), and its "
    "dense fallback needs the orchestrator the copy dropped; only logit_bias and custom logit processors reach the "
    "verify. A fix that broadcast one [bs, V] state over the block would still be wrong: column j must read the "
    "committed output plus the candidates before it. The prefill's first token goes through the normal sampler and "
    "is right. Shrunk (greedy, V 5, gamma 1, oracle drafter, prompt [0], repetition_penalty 2.0): plain decoding "
    "emits [1, 4, 2, 3, 0, ...], SGLang [1, 1, 1, ...]. Applying the penalties per verify column "
    "(corrections.verify_applies_penalties_per_column) makes REQ-001..003 pass (tests/sglang/test_request_findings.py)"
)
# REQ-005 meets the same cause one level down: the verify batch's penalizers are fed the committed output (as plain
# decoding feeds them; REQ-004 is that DSpark does not), and the verify still reads none of it.
_VERIFY_LEVEL = (
    ". REQ-005 (the verify level: the same requests, their penalizers fed the committed output, through "
    "TargetVerifyExecutor.run_non_compact and accept_and_finalize) fails for the same cause; shrunk: V 4, gamma 3, "
    "one row, prompt [0], output [0], drafts [0, 0, 0], repetition_penalty 2.0, column 1's raw logits [1, 0, 0, 1]: "
    "the penalty makes token 3 the argmax (expected [0, 3]), SGLang accepts every draft ([0, 0, 0, 0]); the same "
    "correction makes REQ-005 pass"
)
_NO_PENALTIES_FINDING = Finding(
    status="known: sgl-project/sglang#33493 (issue, open: the acc_linear_penalties name), #33869 (fix PR, open: "
           "additive only, broadcast over the block), #33531 (PR, closed); #28180 (issue, closed), #28242 and #28200 "
           "(PRs, open: EAGLE's relaxed broadcast); #40244 (PR, open: per-position state inside a verify block, the "
           "correction's semantics)",
    path="every platform, DSPARK/DFLASH (spec v2) with a request setting frequency, presence or repetition penalty or "
         "min_new_tokens: speculative/dflash_utils.py:236 (acc_linear_penalties) and :253 (the fallback needs the "
         "orchestrator), managers/scheduler.py:4598 (copy_for_forward), "
         "speculative/dspark_components/dspark_verify.py:338",
    severity="wrong outputs: greedy requests emit tokens plain decoding does not (penalties ignored; a stop token "
             "before min_new_tokens), sampled requests follow the unpenalized law",
    repro="findings/sglang/req_001_verify_ignores_penalties.py", correction=corrections.verify_applies_penalties_per_column)

_NEVER_FED = (
    "evidence: under the DFlash family the penalizers never see the output. ScheduleBatch.prepare_for_decode takes "
    "the speculative branch (spec_prepare_for_decode -> DFlashDraftInputV2.prepare_for_decode) and returns before "
    "cumulate_penalty_output_tokens, which plain decoding (one token per step) and EAGLE (eagle_prepare_for_decode) "
    "call; nothing else feeds BatchedPenalizerOrchestrator.cumulate_output_tokens. So the frequency counts, the "
    "presence and repetition seen sets and the min_new_tokens length stay at zero for the whole request, first token "
    "included. Outputs do not read that state today (the verify drops it: REQ-001's entry), but a fix of the verify "
    "that reads it (#33869) would penalise nothing and keep the min_new_tokens mask on for the whole request (checked: "
    "greedy, gamma 1, min_new_tokens 2, the EOS favoured: [1] * 10 with acc_additive_penalties read, [1, 1, 0] in "
    "plain decoding). "
    "Shrunk: greedy, gamma 1, prompt [0], repetition_penalty 2.0: after step 0 the output is [1, 1] and the "
    "repetition penalizer has seen nothing. Feeding the committed output to the penalizers "
    "(corrections.penalizers_follow_committed_output) makes REQ-004 pass (tests/sglang/test_request_findings.py)"
)
_NEVER_FED_FINDING = Finding(
    status="known: sgl-project/sglang#40244 (PR, open: feeds committed tokens to the penalizers under DFLASH); #33531 "
           "(PR, closed: min_new_tokens length synced from output_ids); #28242 (PR, open)",
    path="every platform, DSPARK/DFLASH (spec v2) with a request setting a penalty or min_new_tokens: "
         "managers/schedule_batch.py:3754 (the speculative branch returns before :3770), "
         "speculative/spec_utils.py:1259 (the DFlash branch feeds nothing)",
    severity="latent wrong outputs: the penalty state the verify would read never grows (with the verify fixed to "
             "read it, min_new_tokens never lifts its mask and no penalty applies)",
    repro="findings/sglang/req_004_penalizers_never_fed.py", correction=corrections.penalizers_follow_committed_output)

_NO_MIN_P = (
    "evidence: DSpark's sampled accept builds its target law from temperature, top-k and top-p only "
    "(dspark_accept._accept_sampling_core: SoftmaxTemp or build_speculative_verify_target_probs) and never reads "
    "sampling_info.min_ps; block-wise rejection (dspark_verify._blockwise_rejection_applies) does not either. Plain "
    "decoding's sampler cuts tokens below min_p times the largest probability. Shrunk: one sampled request, V 5, "
    "gamma 1, temperature 1, min_p 0.3: column 0's law keeps tokens 0, 2, 3 (4% to 6% each) that min_p removes. "
    "Cutting the accept's target law with min_p (corrections.verify_target_law_applies_min_p) makes that case and, "
    "with the penalties corrected, REQ-002 pass (tests/sglang/test_request_findings.py)"
)
_NO_MIN_P_FINDING = Finding(
    status="not found (sgl-project/sglang issues and PRs searched for min_p with DSpark, DFlash, speculative verify "
           "and target probs); the same gap in vLLM's rejection sampler: vllm-project/vllm#42802 (PR, open)",
    path="every platform, DSPARK sampled requests with min_p > 0: "
         "kernels/ops/speculative/dspark/dspark_accept.py:108-122 (chain accept), "
         "speculative/dspark_components/dspark_verify.py:1213 (block-wise rejection)",
    severity="wrong outputs: sampled requests draw tokens min_p excludes in plain decoding",
    repro="findings/sglang/req_002_accept_ignores_min_p.py", correction=corrections.verify_target_law_applies_min_p)


def _request_entries(engine: str, *, verify_level: bool = True) -> tuple:
    """The REQ entries of an engine whose step level is `sglang`'s (and with `verify_level`, its request.verify)."""
    return (
        KnownFailure(engine, "==0.5.23", "REQ-001", r"^request \d+ tokens \(.*" + _PENALTY_PARAMS, _NO_PENALTIES,
                     finding=_NO_PENALTIES_FINDING),
        KnownFailure(engine, "==0.5.23", "REQ-002", r"^step \d+ request \d+: target law at column \d+ \(.*"
                     + _PENALTY_PARAMS, _NO_PENALTIES, finding=_NO_PENALTIES_FINDING),
        KnownFailure(engine, "==0.5.23", "REQ-002", r"^step \d+ request \d+: target law at column \d+ \(.*\bmin_p=",
                     _NO_MIN_P, finding=_NO_MIN_P_FINDING),
        KnownFailure(engine, "==0.5.23", "REQ-003", r"^static frac=None \w+ \(.*" + _PENALTY_PARAMS + r".*\): whole output",
                     _NO_PENALTIES, finding=_NO_PENALTIES_FINDING),
        KnownFailure(engine, "==0.5.23", "REQ-004", r"^step \d+ request \d+: (output length min_new_tokens counts|"
                     r"tokens the frequency penalty counts|tokens the presence/repetition penalties treat as seen)$",
                     _NEVER_FED, observed=r"^(0|\{\}|\[\])$", finding=_NEVER_FED_FINDING),
    ) + ((KnownFailure(engine, "==0.5.23", "REQ-005", r"^row \d+ emitted tokens \(.*" + _PENALTY_PARAMS,
                       _NO_PENALTIES + _VERIFY_LEVEL, finding=_NO_PENALTIES_FINDING),) if verify_level else ())


# sglang-chain runs sglang's step level and greedy verify unchanged (its own attribute moves only the verify level's
# sampled accepts to the chain kernel), so the same causes fail the same REQ contracts there.
KNOWN_FAILURES += _request_entries("sglang") + _request_entries("sglang-chain")
PD_KNOWN_FAILURES: tuple = _request_entries("sglang-pd", verify_level=False)  # sglang-pd declares no request.verify

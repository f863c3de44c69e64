"""The adapter for the real SGLang 0.5.23 DSpark code, on CPU: one mixin per level.

It builds SGLang's inputs through SGLang's own constructors (ServerArgs and its
config bags, ModelConfig, the request pool, allocators and radix cache, Req,
ScheduleBatch.init_new, FutureMap, DraftBlockProposer) and calls the entry
points the scheduler and worker call, then reads the outputs. What a CPU host
forces it to substitute is listed, with what each substitution can hide, in the
docstrings of `runtime` (kernel entries without a CPU path) and `draft` (the
draft model's forward and LM head, the parallel context) and `worker_env` (what the step level's real
Scheduler and DSparkWorkerV2 need on CPU, applied per call). Levels SGLang does
not run on CPU are not declared; their contracts are reported as skipped.
"""

from __future__ import annotations

from contracts import protocol
from contracts.adapters.sglang import env as sglang_env
from contracts.adapters.sglang.dp import SGLangDpMetadata
from contracts.adapters.sglang.draft_level import SGLangDraft
from contracts.adapters.sglang.graph import SGLangGraph
from contracts.adapters.sglang.handoff import SGLangHandoff
from contracts.adapters.sglang.kv import SGLangKv
from contracts.adapters.sglang.ledger import KNOWN_FAILURES, PD_KNOWN_FAILURES
from contracts.adapters.sglang.markov_block import SGLangMarkovDraft
from contracts.adapters.sglang.options import ENGINE_OPTIONS, PD_ENGINE_OPTIONS
from contracts.adapters.sglang.options import option_names as _option_names
from contracts.adapters.sglang.pd_step import SGLangPdStep
from contracts.adapters.sglang.planner import SGLangPlanner
from contracts.adapters.sglang.ranks import SGLangRanks
from contracts.adapters.sglang.relay import SGLangRelay
from contracts.adapters.sglang.request_verify import SGLangRequestVerify
from contracts.adapters.sglang.runtime import runtime
from contracts.adapters.sglang.step import SGLangStep
from contracts.adapters.sglang.verify import SGLangVerify
from contracts.boundary.engine import RequestSemantics

# What SGLang's API takes (SamplingParams and TokenizedGenerateReqInput), by the neutral names of
# contracts.protocol.REQUEST_PARAMETERS: eos_id is a stop token id here (the step level's EOS), stop_strings its
# `stop`, seed its `sampling_seed`, logprobs its `return_logprob`, grammar its json_schema / regex / ebnf /
# structural_tag, custom_logit_processor the request's serialized processor (behind --enable-custom-logit-processor).
ACCEPTED_PARAMETERS = ("temperature", "top_k", "top_p", "max_new_tokens", "eos_id", "frequency_penalty",
                       "presence_penalty", "repetition_penalty", "min_new_tokens", "min_p", "logit_bias",
                       "stop_token_ids", "ignore_eos", "stop_strings", "seed", "n", "logprobs", "grammar",
                       "custom_logit_processor")
# SGLang's documented reading (sampling/penaltylib, sampling_batch_info): the repetition penalizer sees the output
# only (BatchedRepetitionPenalizer scatters output tokens); the additive penalties first, then the scaling ones
# (acc_additive_penalties, then acc_scaling_penalties; the orchestrator's repeat path in the same order); ignore_eos
# turns the stop token ids off too (Req._check_token_based_finish returns first), in plain decoding as well.
REQUEST_SEMANTICS = RequestSemantics(repetition_counts_prompt=False, repetition_before_additive=False,
                                     ignore_eos_ignores_stop_ids=True)
# Each REQ example is a real Scheduler's steps, and a known failure runs its contract twice (as found, then with the
# known corrections): REQ-001 (80 examples) runs half; REQ-003 a share of its rows (its power at the share:
# docs/engines/sglang.md). On sglang-pd every admission also runs SGLang's prefill Scheduler.
REQUEST_SHARES = {"REQ-001": 0.5}
REQUEST_DRAW_SHARE = 0.3
# OPT-001: each example builds a Scheduler with the option on (about 0.7 s) and serves the requests twice; every
# exercised option also runs once on a fixed case (11 more examples), so the drawn ones run at half.
OPTION_SHARES = {"OPT-001": 0.5}
PD_REQUEST_SHARES = {"REQ-001": 0.25, "REQ-002": 0.5, "REQ-004": 0.5}
# The step level passes every whole-request parameter through SGLang's SamplingParams, and reads the penalizers.
REQUEST_CAPABILITIES = frozenset({protocol.REQUEST, protocol.REQUEST_PENALTIES, protocol.REQUEST_MIN_NEW_TOKENS,
                                  protocol.REQUEST_MIN_P, protocol.REQUEST_LOGIT_BIAS, protocol.REQUEST_STOP_TOKENS,
                                  protocol.REQUEST_STATE})


class SGLangAdapter(SGLangHandoff, SGLangDpMetadata, SGLangKv, SGLangGraph, SGLangPlanner, SGLangDraft, SGLangMarkovDraft,
                    SGLangRanks, SGLangRelay, SGLangVerify, SGLangRequestVerify, SGLangStep):
    name = "sglang"
    device = "cpu"
    tested_versions = (sglang_env.SGLANG_VERSION,)
    known_failures = KNOWN_FAILURES
    accepted_parameters = ACCEPTED_PARAMETERS
    request_semantics = REQUEST_SEMANTICS
    # Contracts whose inputs SGLang's own producers never emit: run only with --hardening, never findings.
    hardening = {"VERIFY-012": "SGLang samples drafts over the drafter's vocabulary and pads with id 0; no producer "
                               "emits a draft id >= V (a range check would add a device-to-host sync per verify)"}
    # Shares of the profile's examples (contracts.budget): each handoff example runs ScheduleBatch.prepare_for_decode,
    # whose KV-slot kernel (assign_req_to_token_pool) runs in Triton's interpreter, and each decode-loop example a
    # real Scheduler's steps. `nightly` still runs the share of its 2,000. LOOP-001..004 run in full: they share one
    # machine run (contracts.machine.shared_runs), which costs what their four half runs did.
    # VERIFY-013/014's mixed batches always take the chain kernel (a greedy row is a top-k cut), interpreted: a fifth.
    example_shares = {**{f"HANDOFF-{i:03d}": 0.25 for i in range(1, 11)},
                      **{f"LOOP-{i:03d}": 0.5 for i in (5, 6)}, "VERIFY-013": 0.2, "VERIFY-014": 0.2, **REQUEST_SHARES,
                      **OPTION_SHARES}
    # REQ-003's rows are a real Scheduler's requests (two static configurations, each n requests decoded at once).
    draw_shares = {"REQ-003": REQUEST_DRAW_SHARE}
    # Contracts whose rule the engine does not follow on purpose: known failures that are not findings.
    by_design = {"VERIFY-016": "SGLang's sampled accept reads batch-level randomness and switches every sampled row to "
                               "the chain kernel when any request is greedy (a top-k 1 cut): rows are not invariant to "
                               "their companions' kind (ledger)"}
    # --coverage: SGLang's DSpark code, and the shared parts it meets in a decode step (relay, PD decode, graphs).
    coverage_modules = (
        "sglang.srt.speculative.dspark_components", "sglang.srt.speculative.dspark_disaggregation",
        "sglang.srt.speculative.dflash_info_v2", "sglang.srt.speculative.spec_tp_sync",
        "sglang.srt.managers.overlap_utils", "sglang.srt.disaggregation.decode",
        "sglang.srt.model_executor.runner.decode_cuda_graph_runner", "sglang.kernels.ops.speculative.dspark",
        "sglang.kernels.ops.speculative.ragged_verify_kernels",
    )
    # Not declared: verify.injected-noise (SGLang draws its own coins and Gumbel noise), verify.placeholders
    # (out_tokens past commit_len keep the rejected drafts). `step` runs SGLang's real Scheduler and DSparkWorkerV2
    # (contracts.adapters.sglang.step) with step.ragged (its cap-accept and compact modes in the decode loop; the
    # statistical and whole-request contracts stay static: no step.ragged-laws, no request.ragged), without
    # step.pd-handoff, step.overlap-toggle and step.seeded-sampling (see that module's limits); with step.laws (the
    # target and draft laws its sampled accept reads, recorded at the chain kernel and `_draft_probs`; its draft noise
    # is in-kernel Philox, so none is reported) and step.draft-draws (each step's drawn block and that q: DIST-002
    # checks the draws).
    capabilities = frozenset({protocol.HANDOFF, protocol.DP_METADATA, protocol.KV, protocol.GRAPH, protocol.PLANNER,
                              protocol.DRAFT, protocol.DRAFT_ORACLE, protocol.DRAFT_MARKOV, protocol.VERIFY, protocol.VERIFY_DISTRIBUTIONS,
                              protocol.VERIFY_CHAIN, protocol.VERIFY_CAP_TRIM, protocol.VERIFY_MIXED, protocol.RANKS_TP, protocol.RELAY,
                              protocol.RELAY_PREALLOC,  # RELAY-002 on the CUDA ring branch (relay.py)
                              protocol.STEP, protocol.STEP_LAWS, protocol.STEP_DRAFT_DRAWS, protocol.STEP_RAGGED,
                              protocol.REQUEST_VERIFY,
                              protocol.OPTIONS}) | REQUEST_CAPABILITIES
    # SGLang's SGLANG_DSPARK_* settings, classified from its code (contracts.adapters.sglang.options).
    engine_options = ENGINE_OPTIONS

    def option_names(self) -> tuple:
        """Every SGLANG_DSPARK_* setting SGLang's env registry has (the report lists the ones not declared)."""
        return _option_names()

    def __init__(self):
        sglang_env.check_sglang_installed()  # every load: one line naming the install command, never a fallback
        runtime()
        import sglang

        self.version = sglang.__version__


class SGLangChainAdapter(SGLangAdapter):
    """SGLang with every sampled accept on its default path, `AcceptSampling`'s chain kernel (Triton, through the
    interpreter on CPU: about 10 ms a row, so the Monte-Carlo contracts take tens of minutes here)."""

    name = "sglang-chain"
    use_blockwise_rejection = False


class SGLangPdAdapter(SGLangPdStep, SGLangAdapter):
    """SGLang's step level as a PD decode server: every request is prefilled by SGLang's prefill (a second Scheduler)
    and joins through SGLang's PD decode path (contracts.adapters.sglang.pd_step), so the decode-loop contracts run
    where PD handoff meets DSpark, the FutureMap and overlap. Only the step level: the other levels are the same code
    as `sglang`'s and run there."""

    name = "sglang-pd"
    capabilities = frozenset({protocol.STEP, protocol.STEP_PD, protocol.STEP_PD_DECODE, protocol.STEP_LAWS,
                              protocol.STEP_DRAFT_DRAWS, protocol.OPTIONS}) | REQUEST_CAPABILITIES
    # LOOP-001..004 share one run in full, as on sglang; each PD admission also runs SGLang's prefill Scheduler.
    example_shares = {**{f"LOOP-{i:03d}": 0.5 for i in range(5, 8)}, **PD_REQUEST_SHARES, "OPT-001": 0.25}
    engine_options = PD_ENGINE_OPTIONS  # static verify only: the ragged-mode settings run on sglang
    known_failures = PD_KNOWN_FAILURES
    hardening = {}

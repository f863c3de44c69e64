"""What an engine under test exposes.

An adapter declares `capabilities`; a contract that needs one the engine lacks
is skipped with that reason, never silently passed. The methods of each level
are listed in the boundary module of that level (`contracts.boundary.*`), next
to the plain dataclasses that cross the boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import FrozenSet, Mapping, Optional, Protocol, Tuple, runtime_checkable

# Levels (design card: handoff, dp-metadata, verify, planner, step, ranks).
HANDOFF = "handoff"  # build the decode-side draft input from a PD handoff; a FutureMap relay
DP_METADATA = "dp-metadata"  # draft forward batch DP/MoE sync metadata; count scaling
DP_PADDING = "dp-metadata.padding"  # how many tokens each DP rank runs once the ranks agree (graphs, microbatches)
VERIFY = "verify"  # greedy accept, finalize, and chain sampling with the engine's own randomness (sample_block)
VERIFY_INJECTED_NOISE = "verify.injected-noise"  # sampling/mixed accept that take coins and resample noise as input
VERIFY_EMPTY_BATCH = "verify.empty-batch"  # verify ops accept bs == 0 (a DP-idle rank's batch)
VERIFY_PLACEHOLDERS = "verify.placeholders"  # out_tokens past commit_len hold -1 (a convention, not a law)
VERIFY_DISTRIBUTIONS = "verify.distributions"  # the target / draft laws the sampling accept reads, observable
# Float64 inputs are computed in float64 (no narrowing): what the exact-law contracts need. Their probe noise of
# 2**-200 underflows in float32 and their 1e-9 law tolerance is below float32 rounding; an fp32/bf16 engine leaves
# this out, and is held to the same laws exactly where its arithmetic allows and by the Monte-Carlo gate otherwise.
VERIFY_FLOAT64 = "verify.float64"
VERIFY_CHAIN = "verify.chain-sampling"  # sampled verify is chain (token-by-token) rejection sampling, not block verification
# The engine sees every gamma draft of a row and counts in cap_trim the drafts past the verify cap that would have been
# accepted (DSpark's ragged layout). An engine that schedules only L-1 drafts (vLLM) never sees them and reports 0.
VERIFY_CAP_TRIM = "verify.cap-trim"
VERIFY_MIXED = "verify.mixed-batches"  # greedy and sampled rows in one batch; the same requests over consecutive steps
PLANNER = "planner"
PLANNER_MIN_VERIFY_LEN = "planner.min-verify-len"  # schedule_verify_lens honours min_verify_len != 1
PLANNER_EMPTY_BATCH = "planner.empty-batch"  # layout helpers accept bs == 0
STEP = "step"
STEP_LAWS = "step.laws"  # per step, the laws each sampled row's accept read and the draws its drafts came from
STEP_DRAFT_DRAWS = "step.draft-draws"  # per step, each sampled row's drawn block, the drafts verified and their laws
STEP_DRAFT_CONTEXT = "step.draft-context"  # per step, the target features each request's draft context gained
STEP_PD = "step.pd-handoff"  # requests can join a running engine through a PD handoff (add_requests via "pd")
STEP_RAGGED = "step.ragged"  # the step runs the ragged verify modes (cap-accept, compact), not only static
# The statistical step contracts (DIST-001, DIST-002, REQ-003) run their ragged configurations too: for an engine fast
# enough to draw their thousands of requests in each (contracts/step_modes.py).
STEP_RAGGED_LAWS = "step.ragged-laws"
# The whole-request contracts (REQ-001..004) draw the ragged verify modes too, where the step runs them.
REQUEST_RAGGED = "request.ragged"
STEP_OVERLAP_TOGGLE = "step.overlap-toggle"  # overlap scheduling can be switched on and off between steps
# A static step verifies the drafter's own confidence-truncated proposal (1 <= L <= gamma+1), not always the whole
# block: the engine's drafter cuts its block (DeepSpec's evaluator with --confidence_threshold > 0).
STEP_SELF_TRUNCATING = "step.self-truncating"
# Every request joins through a PD handoff: the engine is a PD decode server ("local" admissions are handed over too).
STEP_PD_DECODE = "step.pd-decode"
# A sampled request's tokens are a function of (seed, request, prompt, params) alone: randomness keyed per request and
# step, not drawn from a batch-wide stream (SGLang's default draws from one generator, so its rows depend on companions).
STEP_SEEDED_SAMPLING = "step.seeded-sampling"
# Whole-request parameters: the step level takes the RequestSpec fields of each request.* sub-capability declared,
# through the engine's own request and batch objects (the meaning of each: contracts.request_oracle).
REQUEST = "request"
REQUEST_PENALTIES = "request.penalties"  # frequency_penalty, presence_penalty, repetition_penalty
REQUEST_MIN_NEW_TOKENS = "request.min-new-tokens"
REQUEST_MIN_P = "request.min-p"
REQUEST_LOGIT_BIAS = "request.logit-bias"
REQUEST_STOP_TOKENS = "request.stop-tokens"  # stop_token_ids, ignore_eos
REQUEST_STATE = "request.state"  # per step, each live request's parameter state (penalty counts, min_new_tokens progress)
# One greedy verify batch of whole requests through the engine's verify entry point: each row's committed output,
# drafts, raw target logits and parameters in, the emitted tokens out. For engines without a step level (vLLM V1),
# and a fast exact check for those with one. It exercises the families that act inside a verify (penalties,
# min_new_tokens, logit bias); stop tokens end a request after the verify, min_p never moves a greedy argmax.
REQUEST_VERIFY = "request.verify"
# The engine's documented passive and output-preserving options (`engine_options`, EngineOption), which the step
# level's new_engine turns on through EngineSpec.options: each must change no output (OPT-001).
OPTIONS = "options"
RANKS = "ranks"
RANKS_TP = "ranks.tp-sync"  # a tensor-parallel group's verify on real rank processes, with the engine's own sync
# DP ranks through whole steps in each verify mode and step kind the engine declares (rank_verify_modes,
# rank_step_kinds), idle ranks among them: prefill, decode and PD-handoff steps, and steps no rank has work in.
RANKS_STEPS = "ranks.steps"
KV = "kv"  # what a decode step reserves in the KV cache, and who writes the allocation lengths
GRAPH = "graph"  # which captured CUDA graph a live batch is admitted to, and the geometry replayed
RELAY = "relay.confidence"  # which earlier draft confidence a step's verify budget reads (row reuse, lag)
# The relay runs on a stream surface it is handed (contracts.streams): its copies complete when a schedule says so.
RELAY_STREAMS = "relay.streams"
# `run_confidence_relay` honours RelayStep.prealloc: a row taken before its request joins (a PD decode server's
# pre-allocation while the KV transfer is in flight), as the engine's PD decode path takes it.
RELAY_PREALLOC = "relay.prealloc"
DRAFT = "draft"  # the draft forward's positions and KV slots, and the commit of target features into its context
DRAFT_ORACLE = "draft.oracle-verify"  # an oracle drafter's block verified greedily (the draft slots' alignment)
DRAFT_MARKOV = "draft.markov-block"  # Markov block sampling from given per-position logits, and the law left for verify


@runtime_checkable
class EngineAdapter(Protocol):
    name: str
    version: str
    device: str
    capabilities: FrozenSet[str]


@dataclass(frozen=True)
class Capability:
    """What declaring a capability promises: the methods and attributes it adds, and the boundary Protocol listing
    them. The load-time check (contracts.validation) asks for every one, so a missing one is exit 4 at load, not a
    mid-run error that looks like the engine's."""

    protocol: Optional[str]  # "module:Class" in contracts.boundary; None for a pure flag
    methods: Tuple[str, ...] = ()  # a pure flag (a promise about behaviour) adds none
    attributes: Tuple[str, ...] = ()  # plain values the contracts read (e.g. which algorithms a handoff builds)
    # A configuration the engine runs in, which changes what a contract expects, not a feature it can lack: the
    # engine matrix does not list it as missing.
    mode: bool = False


# The one table the load-time check reads (contracts.validation): a new capability is one entry here,
# and tests/property/test_cli_validation.py checks each entry against its Protocol.
CAPABILITIES: Mapping[str, Capability] = {
    HANDOFF: Capability("contracts.boundary.handoff:HandoffLevel", (
        "new_handoff_batch", "batch_rows", "new_relay", "record_relay", "admit_handoff", "draft_input_view",
        "relay_snapshot", "prepare_for_decode", "resolve_relay"), ("handoff_algorithms",)),
    DP_METADATA: Capability("contracts.boundary.dp:DpMetadataLevel", (
        "fill_draft_dp_metadata", "fill_scheduler_dp_metadata", "scale_rank_counts", "local_non_padded_tokens")),
    DP_PADDING: Capability("contracts.boundary.dp:DpPaddingLevel", ("coordinate_dp_padding",)),
    VERIFY: Capability("contracts.boundary.verify:VerifyLevel", ("greedy_accept", "finalize", "sample_block")),
    VERIFY_INJECTED_NOISE: Capability("contracts.boundary.verify:VerifyLevel", ("sampling_accept", "mixed_accept")),
    VERIFY_EMPTY_BATCH: Capability(None),
    VERIFY_PLACEHOLDERS: Capability(None),
    VERIFY_DISTRIBUTIONS: Capability("contracts.boundary.verify:VerifyLevel", ("accept_distributions",)),
    VERIFY_FLOAT64: Capability(None),
    VERIFY_CHAIN: Capability(None),
    VERIFY_CAP_TRIM: Capability(None),
    VERIFY_MIXED: Capability("contracts.boundary.verify:MixedBatchLevel", ("mixed_block", "consecutive_blocks")),
    PLANNER: Capability("contracts.boundary.engine:PlannerLevel", (
        "new_sps_table", "sps_lookup", "verify_token_budget", "schedule_verify_lens", "compact_layout",
        "pad_verify_lens_to_graph", "plan_layout")),
    PLANNER_MIN_VERIFY_LEN: Capability(None),
    PLANNER_EMPTY_BATCH: Capability(None),
    STEP: Capability("contracts.boundary.engine:StepLevel", (
        "new_engine", "add_requests", "step", "abort", "set_overlap", "overlap_budget_lag", "request_views",
        "target_next_logits")),
    STEP_LAWS: Capability("contracts.boundary.engine:StepLawsLevel", ("step_laws",)),
    STEP_DRAFT_DRAWS: Capability("contracts.boundary.engine:DraftDrawsLevel", ("draft_draws",)),
    STEP_DRAFT_CONTEXT: Capability("contracts.boundary.engine:DraftContextLevel", ("draft_context_updates",
                                                                                 "target_features")),
    STEP_PD: Capability(None),
    STEP_RAGGED: Capability(None),
    STEP_RAGGED_LAWS: Capability(None),
    REQUEST_RAGGED: Capability(None),
    STEP_OVERLAP_TOGGLE: Capability(None),
    STEP_SELF_TRUNCATING: Capability(None, mode=True),
    STEP_PD_DECODE: Capability(None, mode=True),
    STEP_SEEDED_SAMPLING: Capability(None),
    REQUEST: Capability(None),
    REQUEST_PENALTIES: Capability(None),
    REQUEST_MIN_NEW_TOKENS: Capability(None),
    REQUEST_MIN_P: Capability(None),
    REQUEST_LOGIT_BIAS: Capability(None),
    REQUEST_STOP_TOKENS: Capability(None),
    REQUEST_STATE: Capability("contracts.boundary.engine:RequestStateLevel", ("param_states",)),
    REQUEST_VERIFY: Capability("contracts.boundary.verify:RequestVerifyLevel", ("verify_requests",)),
    OPTIONS: Capability(None, (), ("engine_options",)),
    RANKS: Capability("contracts.boundary.ranks:RanksLevel", ("run_rank_scenario",)),
    RANKS_TP: Capability("contracts.boundary.ranks:TpRanksLevel", ("run_tp_scenario",)),
    RANKS_STEPS: Capability("contracts.boundary.ranks:RankStepsLevel", ("run_rank_steps",),
                            ("rank_verify_modes", "rank_step_kinds")),
    KV: Capability("contracts.boundary.kv:KvLevel", ("kv_admission_limit", "kv_prompt_limit", "kv_page_sizes",
                                                                    "run_kv_steps")),
    GRAPH: Capability("contracts.boundary.graph:GraphLevel", ("graph_admission", "graph_default_capture_bs")),
    DRAFT: Capability("contracts.boundary.draft:DraftLevel", ("draft_step",)),
    DRAFT_ORACLE: Capability("contracts.boundary.draft:OracleDraftLevel", ("oracle_draft_verify",)),
    DRAFT_MARKOV: Capability("contracts.boundary.draft:MarkovDraftLevel", ("markov_draft",)),
    RELAY: Capability("contracts.boundary.relay:ConfidenceRelayLevel", ("run_confidence_relay",), ("confidence_relay_lag",)),
    RELAY_STREAMS: Capability("contracts.boundary.streams:StreamRelayLevel", ("run_confidence_relay_on",)),
    RELAY_PREALLOC: Capability(None),  # a promise about run_confidence_relay (relay.confidence)
}


# Every request parameter a serving API may accept, by its neutral name, and the capability whose contracts exercise it
# (None: no contract exercises it yet). A pack lists what its engine accepts in `accepted_parameters`; the report
# names the accepted ones its pack does not exercise, so a user sees the gap instead of a green row.
REQUEST_PARAMETERS: Mapping[str, Optional[str]] = {
    "temperature": STEP, "top_k": STEP, "top_p": STEP, "max_new_tokens": STEP, "eos_id": STEP,
    "frequency_penalty": REQUEST_PENALTIES, "presence_penalty": REQUEST_PENALTIES,
    "repetition_penalty": REQUEST_PENALTIES, "min_new_tokens": REQUEST_MIN_NEW_TOKENS, "min_p": REQUEST_MIN_P,
    "logit_bias": REQUEST_LOGIT_BIAS, "stop_token_ids": REQUEST_STOP_TOKENS, "ignore_eos": REQUEST_STOP_TOKENS,
    "stop_strings": None, "seed": None, "n": None, "logprobs": None, "grammar": None,
    "custom_logit_processor": None,
}


# The families a verify batch exercises (REQUEST_VERIFY); the step level's REQUEST exercises every family.
VERIFY_FAMILIES = frozenset({REQUEST_PENALTIES, REQUEST_MIN_NEW_TOKENS, REQUEST_LOGIT_BIAS})
VERIFY_SETTINGS = frozenset({"temperature", "top_k", "top_p"})  # the verify level's cases carry these too


def exercised_parameters(capabilities, accepted=()) -> frozenset:
    """The request parameters a pack with these capabilities exercises (a request.* one needs a level too: the step
    level's whole requests, or the verify level's batches for the families that act inside a verify). Given the
    engine's `accepted` list, a family's parameter the engine refuses is never drawn (DeepSpec's stop list without
    ignore_eos), so it is not exercised either."""
    caps = frozenset(capabilities)
    refused = {p for p, cap in REQUEST_PARAMETERS.items() if accepted and cap != STEP and p not in accepted}

    def exercised(p, cap) -> bool:
        if cap == STEP:
            return STEP in caps or (p in VERIFY_SETTINGS and VERIFY in caps)
        if cap is None or cap not in caps:
            return False
        return REQUEST in caps or (REQUEST_VERIFY in caps and cap in VERIFY_FAMILIES)

    return frozenset(p for p, cap in REQUEST_PARAMETERS.items() if p not in refused and exercised(p, cap))

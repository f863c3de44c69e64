"""The adapter for the embedded reference engine (`dspark`), one mixin per level."""

from __future__ import annotations

import dspark
from contracts import protocol
from contracts.adapters.reference import placement as _placement
from contracts.adapters.reference.dp import ReferenceDpMetadata
from contracts.adapters.reference.draft import ReferenceDraft
from contracts.adapters.reference.engine import ENGINE_OPTIONS, ReferenceEngine, ReferencePlanner
from contracts.adapters.reference.graph import ReferenceGraph
from contracts.adapters.reference.handoff import ReferenceHandoff
from contracts.adapters.reference.kv import ReferenceKv
from contracts.adapters.reference.rank_steps import ReferenceRankSteps
from contracts.adapters.reference.ranks import ReferenceRanks
from contracts.adapters.reference.relay import ReferenceRelay
from contracts.adapters.reference.verify import ReferenceVerify
from contracts.validation import placement


class ReferenceAdapter(ReferenceHandoff, ReferenceDpMetadata, ReferenceKv, ReferenceGraph, ReferenceDraft, ReferenceRelay,
                       ReferenceRanks, ReferenceRankSteps, ReferencePlanner, ReferenceEngine, ReferenceVerify):
    """`device` and `backend` choose where the verify level runs (None: $DSPARK_DEVICE / $DSPARK_BACKEND, else the
    CPU and `auto`, which is Triton on CUDA and torch on the CPU); the other levels run on the CPU whatever they say."""

    name = "reference"
    version = dspark.__version__
    tested_versions = (dspark.__version__,)  # the engine ships with its pack: the version in this tree is the one tested
    known_failures = ()
    # dspark.engine_types.SamplingParams: the basics and the parameters that read the request's history.
    accepted_parameters = ("temperature", "top_k", "top_p", "max_new_tokens", "eos_id", "frequency_penalty",
                           "presence_penalty", "repetition_penalty", "min_new_tokens", "min_p", "logit_bias",
                           "stop_token_ids", "ignore_eos")
    engine_options = ENGINE_OPTIONS
    coverage_modules = ("dspark",)  # --coverage: the whole engine is its DSpark code
    backends = _placement.BACKENDS
    resolve_backend = staticmethod(_placement.resolve_backend)
    placement_env = staticmethod(_placement.placement_env)
    capabilities = frozenset({protocol.HANDOFF, protocol.DP_METADATA, protocol.DP_PADDING, protocol.RANKS, protocol.PLANNER, protocol.STEP,
                              protocol.RANKS_STEPS,
                              protocol.STEP_LAWS, protocol.STEP_DRAFT_DRAWS,
                              protocol.STEP_DRAFT_CONTEXT, protocol.STEP_PD, protocol.STEP_RAGGED, protocol.STEP_RAGGED_LAWS,
                              protocol.STEP_OVERLAP_TOGGLE, protocol.STEP_SEEDED_SAMPLING, protocol.RELAY, protocol.RELAY_STREAMS,
                              protocol.RELAY_PREALLOC, protocol.REQUEST, protocol.REQUEST_RAGGED, protocol.REQUEST_PENALTIES,
                              protocol.REQUEST_MIN_NEW_TOKENS, protocol.REQUEST_MIN_P, protocol.REQUEST_LOGIT_BIAS,
                              protocol.REQUEST_STOP_TOKENS, protocol.REQUEST_STATE, protocol.REQUEST_VERIFY, protocol.OPTIONS,
                              protocol.VERIFY, protocol.VERIFY_INJECTED_NOISE, protocol.VERIFY_EMPTY_BATCH, protocol.VERIFY_PLACEHOLDERS,
                              protocol.KV, protocol.GRAPH, protocol.PLANNER_MIN_VERIFY_LEN, protocol.PLANNER_EMPTY_BATCH,
                              protocol.VERIFY_DISTRIBUTIONS, protocol.VERIFY_CHAIN, protocol.VERIFY_CAP_TRIM, protocol.VERIFY_MIXED,
                              protocol.DRAFT,
                              protocol.DRAFT_ORACLE, protocol.DRAFT_MARKOV, protocol.RANKS_TP,
                              # Both backends compute in float64 when handed float64 (the kernels' ACC type).
                              protocol.VERIFY_FLOAT64})

    def __init__(self, device: str | None = None, backend: str | None = None):
        where = placement(device, backend, pack=type(self), device_flag="device", backend_flag="backend")
        self.device, self.backend = where.device, where.backend
        if self.backend == "triton":
            _placement.load_kernels(self.device)

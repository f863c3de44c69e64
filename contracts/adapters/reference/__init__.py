"""The adapter for the embedded reference engine (`dspark`), one mixin per level."""

from __future__ import annotations

import dspark
from contracts import protocol
from contracts.adapters.reference.dp import ReferenceDpMetadata
from contracts.adapters.reference.draft import ReferenceDraft
from contracts.adapters.reference.engine import ReferenceEngine, ReferencePlanner
from contracts.adapters.reference.graph import ReferenceGraph
from contracts.adapters.reference.handoff import ReferenceHandoff
from contracts.adapters.reference.kv import ReferenceKv
from contracts.adapters.reference.ranks import ReferenceRanks
from contracts.adapters.reference.verify import ReferenceVerify


class ReferenceAdapter(ReferenceHandoff, ReferenceDpMetadata, ReferenceKv, ReferenceGraph, ReferenceDraft,
                       ReferenceRanks, ReferencePlanner, ReferenceEngine, ReferenceVerify):
    name = "reference"
    version = dspark.__version__
    device = "cpu"
    capabilities = frozenset({protocol.HANDOFF, protocol.DP_METADATA, protocol.RANKS, protocol.PLANNER, protocol.STEP,
                              protocol.VERIFY, protocol.VERIFY_INJECTED_NOISE, protocol.VERIFY_EMPTY_BATCH, protocol.VERIFY_PLACEHOLDERS,
                              protocol.KV, protocol.GRAPH, protocol.PLANNER_MIN_VERIFY_LEN, protocol.PLANNER_EMPTY_BATCH,
                              protocol.VERIFY_DISTRIBUTIONS, protocol.VERIFY_CHAIN, protocol.DRAFT, protocol.RANKS_TP})

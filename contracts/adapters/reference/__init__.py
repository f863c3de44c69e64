"""The adapter for the embedded reference engine (`dspark`), one mixin per level."""

from __future__ import annotations

import os
import sys

import dspark
from contracts import protocol
from contracts.adapters.reference.dp import ReferenceDpMetadata
from contracts.adapters.reference.draft import ReferenceDraft
from contracts.adapters.reference.engine import ReferenceEngine, ReferencePlanner
from contracts.adapters.reference.graph import ReferenceGraph
from contracts.adapters.reference.handoff import ReferenceHandoff
from contracts.adapters.reference.kv import ReferenceKv
from contracts.adapters.reference.ranks import ReferenceRanks
from contracts.adapters.reference.relay import ReferenceRelay
from contracts.adapters.reference.verify import ReferenceVerify
from contracts.validation import placement

_KERNELS = "dspark.verify.triton_kernels"


def _load_kernels(device: str) -> None:
    """Import the Triton kernels as the device needs them: interpreted on the CPU, compiled on CUDA. Triton fixes
    the mode when the module is first imported, so a module imported the other way is refused, not used."""
    if device == "cpu" and _KERNELS not in sys.modules and not os.environ.get("TRITON_INTERPRET"):
        os.environ["TRITON_INTERPRET"] = "1"  # unset or empty; placement() refused any other explicit value
    from dspark.verify import triton_kernels

    if triton_kernels.INTERPRETED != (device == "cpu"):
        want = "interpreted (TRITON_INTERPRET=1)" if device == "cpu" else "compiled (TRITON_INTERPRET unset)"
        raise ValueError(f"backend: 'triton' on {device} needs the kernels {want}, but {_KERNELS} was already "
                         "imported the other way in this process")


class ReferenceAdapter(ReferenceHandoff, ReferenceDpMetadata, ReferenceKv, ReferenceGraph, ReferenceDraft, ReferenceRelay,
                       ReferenceRanks, ReferencePlanner, ReferenceEngine, ReferenceVerify):
    """`device` and `backend` choose where the verify level runs (None: $DSPARK_DEVICE / $DSPARK_BACKEND, else the
    CPU and `auto`, which is Triton on CUDA and torch on the CPU); the other levels run on the CPU whatever they say."""

    name = "reference"
    version = dspark.__version__
    capabilities = frozenset({protocol.HANDOFF, protocol.DP_METADATA, protocol.DP_PADDING, protocol.RANKS, protocol.PLANNER, protocol.STEP,
                              protocol.STEP_LAWS, protocol.RELAY,
                              protocol.VERIFY, protocol.VERIFY_INJECTED_NOISE, protocol.VERIFY_EMPTY_BATCH, protocol.VERIFY_PLACEHOLDERS,
                              protocol.KV, protocol.GRAPH, protocol.PLANNER_MIN_VERIFY_LEN, protocol.PLANNER_EMPTY_BATCH,
                              protocol.VERIFY_DISTRIBUTIONS, protocol.VERIFY_CHAIN, protocol.VERIFY_CAP_TRIM, protocol.DRAFT,
                              protocol.RANKS_TP,
                              # Both backends compute in float64 when handed float64 (the kernels' ACC type).
                              protocol.VERIFY_FLOAT64})

    def __init__(self, device: str | None = None, backend: str | None = None):
        where = placement(device, backend, device_flag="device", backend_flag="backend")
        self.device, self.backend = where.device, where.backend
        if self.backend == "triton":
            _load_kernels(self.device)

"""What an engine under test exposes.

An adapter declares `capabilities`; a contract that needs one the engine lacks
is skipped with that reason, never silently passed. The methods of each level
are listed in the boundary module of that level (`contracts.boundary.*`), next
to the plain dataclasses that cross the boundary.
"""

from __future__ import annotations

from typing import FrozenSet, Protocol, runtime_checkable

# Levels (design card: handoff, dp-metadata, verify, planner, step, ranks).
HANDOFF = "handoff"  # build the decode-side draft input from a PD handoff; a FutureMap relay
DP_METADATA = "dp-metadata"  # draft forward batch DP/MoE sync metadata; count scaling
VERIFY = "verify"  # greedy accept, finalize, and chain sampling with the engine's own randomness (sample_block)
VERIFY_INJECTED_NOISE = "verify.injected-noise"  # sampling/mixed accept that take coins and resample noise as input
VERIFY_EMPTY_BATCH = "verify.empty-batch"  # verify ops accept bs == 0 (a DP-idle rank's batch)
VERIFY_PLACEHOLDERS = "verify.placeholders"  # out_tokens past commit_len hold -1 (a convention, not a law)
PLANNER = "planner"
STEP = "step"
RANKS = "ranks"


@runtime_checkable
class EngineAdapter(Protocol):
    name: str
    version: str
    device: str
    capabilities: FrozenSet[str]

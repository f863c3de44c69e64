"""Graph level: which captured CUDA graph a live decode batch is admitted to, and the geometry it replays.

A runner captures graphs for a set of batch sizes, each `bs` request slots of
`width` tokens (the verify window T on the target, the draft query width Q on
the draft), in one forward mode. A live batch is admitted when a captured graph
can hold it; it is replayed at the smallest captured size that fits, padded up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, Tuple


@dataclass(frozen=True)
class GraphCase:
    capture_bs: Tuple[int, ...]  # the configured decode capture sizes
    max_running_requests: int  # the request pool's size
    gamma: int
    sample_from_anchor: bool
    runner: str  # "target" (verify graphs) or "draft" (draft-block graphs)
    local_bs: int  # requests in this rank's live batch
    batch_width: int  # tokens per request of the live batch's spec info
    rank_counts: Optional[Tuple[int, ...]]  # raw per-rank request counts under DP attention; None without DP
    can_run_vote: bool  # the scheduler's gathered can-run-a-graph vote (read under DP sync)
    draft_is_moe: bool = False  # a MoE draft joins the DP gathers; a dense draft runs DP-local (its own count)

    @property
    def syncs_across_ranks(self) -> bool:
        """Whether the runner's forward joins the DP collectives, so every rank must replay one size."""
        return self.rank_counts is not None and (self.runner == "target" or self.draft_is_moe)

    def limit_distances(self) -> dict:
        """How far the live batch is from where admission and padding change (Hypothesis `target()` steers the
        nightly run toward 0): the nearest captured size, and one past the largest."""
        sizes = [c for c in self.capture_bs if c <= self.max_running_requests] or [self.max_running_requests]
        return {"bs to the nearest captured size": min(abs(self.local_bs - c) for c in sizes),
                "bs to one past the largest size": abs(self.local_bs - max(sizes) - 1)}

    @property
    def runner_width(self) -> int:
        """Tokens per request slot of the runner's graphs, by the algorithm's definition."""
        if self.runner == "target":
            return self.gamma + 1
        return self.gamma if self.sample_from_anchor else self.gamma + 1


@dataclass(frozen=True)
class GraphObservation:
    captured_bs: Tuple[int, ...]  # the sizes the runner captured
    captured_width: int  # tokens per request slot of its graphs
    admitted: bool
    replay_bs: Optional[int] = None  # the captured size replayed (admitted batches)
    replay_tokens: Optional[int] = None  # tokens of the replayed graph
    raw_bs: Optional[int] = None  # the live requests the replay carries
    error: Optional[str] = None  # admission or replay raised


class GraphLevel(Protocol):
    def graph_admission(self, case: GraphCase) -> GraphObservation: ...  # build the runner, admit and load one batch
    # The decode batch sizes the engine captures by default with speculative decoding, up to max_bs, from the
    # engine's own function (the cases are drawn around them).
    def graph_default_capture_bs(self, max_bs: int) -> tuple: ...

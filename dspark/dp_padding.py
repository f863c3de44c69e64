"""DP padding: before a step's forward the DP ranks agree how many tokens each one runs.

Each rank contributes a plan of its own step (`local_plan`): its tokens, the captured graph size it would replay
alone (the smallest captured size >= its tokens; none when no size covers it), and whether it would split the step
into microbatches. The plans are all-gathered, and every rank takes the same decision from them (`agree`):

* graphs are replayed by all ranks or by none: by all exactly when every rank's plan has a graph size;
* microbatching is done by all ranks or by none: by all when each rank asks for it and each rank's last microbatch
  would still hold one of its real tokens (the shared count split into equal parts, the last part taking the rest);
* ranks that run in lockstep (graphs or microbatches) run one shared count: the largest of the counts they would run
  alone (graph sizes under graphs, tokens otherwise); ranks that do not run in lockstep are not padded at all.

An idle rank (no tokens) still takes part: its plan has 0 tokens. `coordinate` is one rank's whole step, with the
all-gather handed in (a collective across real rank processes, or any function returning every rank's plan).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Tuple

from dspark import _validate
from dspark.graph_buckets import graph_batch_size


@dataclass(frozen=True)
class RankPlan:
    tokens: int
    graph_tokens: Optional[int]  # the smallest captured size >= tokens; None when none covers it (or no graphs)
    wants_microbatch: bool


@dataclass(frozen=True)
class Padding:
    padded_tokens: int  # what this rank runs
    rank_padded_tokens: Tuple[int, ...]  # what every rank runs, in rank order
    graph: bool
    microbatched: bool


def graph_size(tokens: int, graph_sizes: Sequence[int]) -> Optional[int]:
    """The smallest captured size >= tokens (sizes strictly increasing); None without graphs or when none covers it."""
    return graph_batch_size(tokens, graph_sizes) if graph_sizes else None


def local_plan(tokens: int, graph_sizes: Sequence[int], microbatches: int, threshold: int) -> RankPlan:
    if isinstance(tokens, bool) or not isinstance(tokens, int):
        raise TypeError(f"tokens: expected an int, got {type(tokens).__name__}")
    if tokens < 0:
        raise ValueError(f"tokens: must be >= 0, got {tokens}")
    sizes = list(graph_sizes)
    if any(b <= a for a, b in zip(sizes, sizes[1:])) or any(s < 1 for s in sizes):
        raise ValueError(f"graph_sizes: must be positive and strictly increasing, got {sizes}")
    _validate.positive_int("microbatches", microbatches)
    return RankPlan(tokens, graph_size(tokens, sizes), microbatches > 1 and tokens >= threshold)


def last_microbatch_has_tokens(tokens: int, shared: int, microbatches: int) -> bool:
    return tokens > (shared // microbatches) * (microbatches - 1)


def agree(rank: int, plans: Sequence[RankPlan], microbatches: int) -> Padding:
    plans = list(plans)
    if not plans or not all(isinstance(p, RankPlan) for p in plans):
        raise ValueError(f"plans: expected one RankPlan per rank, got {plans!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < len(plans):
        raise ValueError(f"rank: expected an int in [0, {len(plans)}), got {rank!r}")
    _validate.positive_int("microbatches", microbatches)
    graph = all(p.graph_tokens is not None for p in plans)
    shared = max(p.graph_tokens if graph else p.tokens for p in plans)
    microbatched = microbatches > 1 and all(p.wants_microbatch and last_microbatch_has_tokens(p.tokens, shared,
                                                                                             microbatches) for p in plans)
    counts = tuple([shared] * len(plans)) if graph or microbatched else tuple(p.tokens for p in plans)
    return Padding(counts[rank], counts, graph, microbatched)


def coordinate(rank: int, tokens: int, graph_sizes: Sequence[int], microbatches: int, threshold: int,
               all_gather: Callable[[RankPlan], Sequence[RankPlan]]) -> Padding:
    """One rank's step: its plan, every rank's plan (the collective every rank joins, idle or not), the decision."""
    return agree(rank, list(all_gather(local_plan(tokens, graph_sizes, microbatches, threshold))), microbatches)

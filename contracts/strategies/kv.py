"""KV cases: requests admitted up to the engine's own limit (the edge included), decode steps that keep them decoding."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from hypothesis import strategies as st

from contracts.boundary.kv import KvCase, KvRequest


@dataclass(frozen=True)
class KvPlan:
    """An engine-neutral recipe; `bind` turns it into a case within one engine's admission limit, at one of its page sizes."""

    gamma: int
    page_choice: int
    context_len: int
    requests: Tuple[Tuple[bool, float, int], ...]  # (at the admission limit, fill fraction otherwise, spare new tokens)
    commits: Tuple[Tuple[int, ...], ...]  # [step][request] in 1..T


@st.composite
def kv_plans(draw, *, max_requests=4, max_steps=4) -> KvPlan:
    gamma = draw(st.integers(1, 15), label="gamma")
    T = gamma + 1
    n = draw(st.integers(1, max_requests), label="requests")
    steps = draw(st.integers(1, max_steps), label="steps")
    reqs = tuple(draw(st.tuples(st.booleans(), st.floats(0.0, 1.0), st.integers(0, 3)), label=f"request {i}")
                 for i in range(n))
    commits = tuple(tuple(draw(st.lists(st.integers(1, T), min_size=n, max_size=n), label=f"step {s} commits"))
                    for s in range(steps))
    return KvPlan(gamma, draw(st.integers(0, 7), label="page_choice"), draw(st.integers(48, 640), label="context_len"),
                  reqs, commits)


def bind(plan: KvPlan, limit: int, page_size: int) -> Optional[KvCase]:
    """Requests with prompt + max_new_tokens <= limit (= limit when asked), still decoding at every reservation:
    a step's reservation sees generated = 1 + the commits before it, which stays below max_new_tokens.
    None when the engine's limit cannot hold the plan (then there is nothing the engine would admit)."""
    steps = len(plan.commits)
    commits = [list(step) for step in plan.commits]
    requests = []
    for i, (at_limit, frac, spare) in enumerate(plan.requests):
        if limit < steps + 2:
            return None
        need = 2 + sum(commits[s][i] for s in range(steps - 1))  # generated before the last reservation, plus one
        if need + 1 > limit:  # these commits do not fit: commit one token per step
            for s in range(steps):
                commits[s][i] = 1
            need = steps + 1
        total = limit if at_limit else min(limit, max(need + 1, int(frac * limit)))
        max_new = min(need + (0 if at_limit else spare), total - 1)
        requests.append(KvRequest(total - max_new, max_new))
    return KvCase(plan.gamma, page_size, plan.context_len, tuple(requests), tuple(tuple(s) for s in commits))

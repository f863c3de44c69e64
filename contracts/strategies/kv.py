"""KV cases: requests admitted up to the engine's own limit (the edge included), decode steps that keep them decoding."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
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


MAX_GAMMA = 15


def _commit(code: int, T: int) -> int:
    """1..T from a code in 1..MAX_GAMMA+1 (the largest T): the lowest code is 1, the highest T, none skipped. Drawn on
    the largest scale and scaled, a commit of 1 or of T stays one while gamma shrinks (a code drawn in 1..T fell out
    of range, so a failure that needs a full commit kept the gamma it was found at)."""
    return -(-code * T // (MAX_GAMMA + 1))


@lru_cache(maxsize=None)
def _requests(steps: int, max_requests: int):
    """Requests (at the admission limit, fill fraction otherwise, spare new tokens, a commit code per step); built
    once per shape, as building a strategy costs more than drawing from it."""
    codes = st.lists(st.integers(1, MAX_GAMMA + 1), min_size=steps, max_size=steps)
    return st.lists(st.tuples(st.booleans(), st.floats(0.0, 1.0), st.integers(0, 3), codes), min_size=1, max_size=max_requests)


@st.composite
def kv_plans(draw, *, max_requests=4, max_steps=4) -> KvPlan:
    gamma = draw(st.integers(1, MAX_GAMMA), label="gamma")
    T = gamma + 1
    steps = draw(st.integers(1, max_steps), label="steps")
    page_choice = draw(st.integers(0, 7), label="page_choice")
    context_len = draw(st.integers(48, 640), label="context_len")
    # One list of whole requests, each with its commit at every step, drawn after the fields of fixed size: shrinking
    # deletes a request with its commits, and leaves what was drawn before it in place.
    reqs = draw(_requests(steps, max_requests), label="requests")
    commits = tuple(tuple(_commit(r[3][s], T) for r in reqs) for s in range(steps))
    return KvPlan(gamma, page_choice, context_len, tuple(r[:3] for r in reqs), commits)


def bind(plan: KvPlan, limit: int, page_size: int, longest_prompt: Optional[int] = None) -> Optional[KvCase]:
    """Requests with prompt + max_new_tokens <= limit (= limit when asked) and prompt <= longest_prompt (the
    engine's own bound on a prompt alone; None: only `limit`), still decoding at every reservation: a step's
    reservation sees generated = 1 + the commits before it, which stays below max_new_tokens.
    None when the engine's limit cannot hold the plan (then there is nothing the engine would admit)."""
    longest_prompt = limit - 1 if longest_prompt is None else min(longest_prompt, limit - 1)
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
        max_new = max(max_new, total - longest_prompt)  # a longer prompt than the engine admits gives way to new tokens
        requests.append(KvRequest(total - max_new, max_new))
    return KvCase(plan.gamma, page_size, plan.context_len, tuple(requests), tuple(tuple(s) for s in commits))

from __future__ import annotations

import random

from hypothesis import strategies as st

from contracts.boundary.handoff import HandoffCase

MAX_BS = 64
ALGORITHMS = ("dspark", "dflash")  # the DFlash family: both reuse the DFlash spec-v2 draft input
MAX_TOKEN = 151935  # largest Qwen vocabulary id; the relay must carry any token id

# Seed example from the historical PD-decode crash.
SEED_CASE = HandoffCase(prompt_lens=(11, 23), req_pool_indices=(3, 7), bonus_tokens=(101, 202),
                        enable_overlap=True, pool_size=16, gamma=5)


def _decode_request(code: int, bonus: int, carries: bool) -> tuple:
    """(prompt tokens 1..4096, tokens sampled 1..4 (1 unless requests carry earlier outputs), bonus id); the
    lengths from one drawn integer, the bonus from another (as one digit of a shared code it was mostly 0)."""
    prompt, outputs = divmod(code, 4)
    return 1 + prompt, 1 + outputs if carries else 1, bonus


@st.composite
def handoff_cases(draw, *, overlap=None, min_bs=0, max_bs=MAX_BS) -> HandoffCase:
    """A decode-side handoff: bs 0..64 (0 = DP idle), distinct arbitrary pool rows, either family algorithm, and
    requests that carry earlier outputs (retracted and prefilled again)."""
    # One list of whole requests (prompt, tokens sampled, bonus), so shrinking deletes requests: with a drawn bs and
    # one list of that length per field, every shrink of bs misaligned the lists after it (seconds a failure). A
    # drawn floor on its length keeps large batches as common as small ones (a plain list is mostly short).
    # Distinct pool rows in any order come from one seed (drawn first: it stays put while the list shrinks); a
    # drawn row per request with a uniqueness filter cost more generation than the contracts' checks.
    rows_seed = draw(st.integers(0, 2**32 - 1), label="pool rows seed")
    floor = draw(st.sampled_from(sorted({min_bs, max(min_bs, max_bs // 2)})), label="bs floor")
    carries = draw(st.booleans(), label="requests carry earlier outputs")
    request = st.tuples(st.integers(0, 4 * 4096 - 1), st.integers(0, MAX_TOKEN))
    reqs = [_decode_request(code, bonus, carries) for code, bonus in
            draw(st.lists(request, min_size=floor, max_size=max_bs), label="requests")]
    prompts, outputs, bonus = (tuple(r[k] for r in reqs) for k in range(3))
    pool_size = max(len(reqs), 1) + draw(st.integers(0, 64), label="free pool rows")
    rows = tuple(random.Random(rows_seed).sample(range(pool_size), len(reqs)))
    enable_overlap = draw(st.booleans(), label="enable_overlap") if overlap is None else overlap
    gamma = draw(st.integers(1, 16), label="gamma")
    algorithm = draw(st.sampled_from(ALGORITHMS), label="algorithm")
    return HandoffCase(prompts, rows, bonus, enable_overlap, pool_size, gamma, algorithm, outputs if carries else ())

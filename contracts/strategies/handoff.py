from __future__ import annotations

from hypothesis import strategies as st

from contracts.boundary.handoff import HandoffCase

MAX_BS = 64
ALGORITHMS = ("dspark", "dflash")  # the DFlash family: both reuse the DFlash spec-v2 draft input
MAX_TOKEN = 151935  # largest Qwen vocabulary id; the relay must carry any token id

# Seed example from the historical PD-decode crash.
SEED_CASE = HandoffCase(prompt_lens=(11, 23), req_pool_indices=(3, 7), bonus_tokens=(101, 202),
                        enable_overlap=True, pool_size=16, gamma=5)


@st.composite
def handoff_cases(draw, *, overlap=None, min_bs=0, max_bs=MAX_BS) -> HandoffCase:
    """A decode-side handoff: bs 0..64 (0 = DP idle), distinct arbitrary pool rows, either family algorithm, and
    requests that carry earlier outputs (retracted and prefilled again)."""
    bs = draw(st.integers(min_bs, max_bs), label="bs")
    pool_size = draw(st.integers(max(bs, 1), bs + 64), label="pool_size")
    rows = draw(st.lists(st.integers(0, pool_size - 1), min_size=bs, max_size=bs, unique=True), label="req_pool_indices")
    prompts = draw(st.lists(st.integers(1, 4096), min_size=bs, max_size=bs), label="prompt_lens")
    outputs = draw(st.just(()) | st.lists(st.integers(1, 4), min_size=bs, max_size=bs).map(tuple), label="output_lens")
    bonus = draw(st.lists(st.integers(0, MAX_TOKEN), min_size=bs, max_size=bs), label="bonus_tokens")
    enable_overlap = draw(st.booleans(), label="enable_overlap") if overlap is None else overlap
    gamma = draw(st.integers(1, 16), label="gamma")
    algorithm = draw(st.sampled_from(ALGORITHMS), label="algorithm")
    return HandoffCase(tuple(prompts), tuple(rows), tuple(bonus), enable_overlap, pool_size, gamma, algorithm, outputs)

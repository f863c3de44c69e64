"""What share of each contract's budget the plain `check` runs on vllm-dspark (contracts.budget), so that
`dspark-contracts check --engine vllm-dspark` (and `vllm-dspark-block`) finishes within 10 minutes on 2 cores.

Why shares at all: vLLM's V2 kernels run in Triton's interpreter, one program instance after another, so the time
is per request row, not per tensor: one verified row of the Monte-Carlo contracts costs 16-24 ms of CPU, and
LOSSLESS-003..006's 368,000 rows would take about two hours; at the ci profile's 100 examples the VERIFY contracts
that verify large or repeated batches take tens of minutes each. `nightly` runs every row (draw shares never apply
there); `tests/vllm_dspark/test_contracts_budget.py -m nightly` runs every contract with no share at all.

CPU seconds per contract at these shares, and the Monte-Carlo contracts' false-alarm rate and power at them
(`python -m contracts.calibration --draw-share`), are in docs/engines/vllm-dspark.md ("Budget")."""

# Examples: ci's 100 (dev's 50) times the share, after the contract's own cap (VERIFY-004/007/011 at 50, VERIFY-012 at
# 30). Each share keeps 3-15 examples at ci, plus the contract's pinned examples. Not shared: VERIFY-003 (greedy, about
# 15 s at the full 100; it catches the re-inserted row-shift bugs), VERIFY-015 (one fixed scenario), DPPAD-001..005
# (capped at 10 examples, rank processes), DRAFT-004 (Monte-Carlo, 240 blocks, about 10 s).
EXAMPLE_SHARES = {
    "VERIFY-001": 0.1,  # bounds: sampled batches of up to 13 rows x 8 columns, about 0.5 s each
    "VERIFY-002": 0.1,  # bookkeeping, as VERIFY-001
    "VERIFY-004": 0.16,  # 8 of its 50
    "VERIFY-007": 0.06,  # 3 of its 50: a 64-row high-entropy batch verified 4 times per example, about 5 s
    "VERIFY-008": 0.08,
    "VERIFY-011": 0.3,  # 15 of its 50: the top-k/top-p cut, about 0.2 s each
    "VERIFY-012": 0.27,  # 8 of its 30; runs only with --hardening
    "VERIFY-013": 0.08,  # mixed greedy/sampled batches, each case verified 2 to 5 times
    "VERIFY-014": 0.05,
    "VERIFY-016": 0.08,
    "DRAFT-001": 0.5,  # the draft-input kernel after prefill and after verify, about 0.2 s each (caught at 25)
    "DRAFT-002": 0.5,
    "REQ-005": 0.5,  # one interpreted batch each, about 0.1 s (ci's 100 took 10.6 s, its half 2.9 s)
}

# Monte-Carlo rows (contracts.budget.rows). Fewer rows cost power, so the cheap rows get the larger share: LOSSLESS-004's
# rows (a 3-token Markov target) cost about 16 ms each, the positional ones about 22 ms.
DRAW_SHARES = {
    "LOSSLESS-003": 0.04,  # 3,200 of 80,000 rows
    "LOSSLESS-004": 0.08,  # 5,120 of 64,000
    "LOSSLESS-005": 0.04,  # 3,200 of 80,000
    "LOSSLESS-006": 0.02,  # 2,880 of 144,000 (chain only: the block engine does not declare verify.chain-sampling)
}

"""Draft forward positions and the commit of target features into the draft context (SGLang 0.5.23 E2-E3).

Expectations come from the case alone: the verify window of a request with committed length n covers
positions n .. n+T-1 at the slots its row holds there; the draft forward of width Q (gamma with the anchor
row sampling, gamma + 1 otherwise) reads [anchor, mask, ...] at the first Q of them; the commit writes the
target features of exactly the committed columns, each at its own position.
"""

from __future__ import annotations

from contracts.checks import expect, expect_equal
from contracts.protocol import DRAFT, DRAFT_ORACLE
from contracts.registry import contract
from contracts.strategies.draft import draft_cases


@contract("DRAFT-001", "the draft forward has Q rows per request (gamma, or gamma+1 without the anchor row sampling): "
          "[anchor, mask, ...] at positions n .. n+Q-1, writing the KV slots the request's row holds there",
          requires={DRAFT}, cases=draft_cases)
def draft_forward_geometry(engine, case):
    obs = engine.draft_step(case)
    q = case.gamma if case.sample_from_anchor else case.gamma + 1
    expect_equal("draft query width Q", q, obs.query_width)
    for b, n in enumerate(case.prefix_lens):
        expect_equal(f"request {b} draft input ids", (case.bonus_tokens[b],) + (obs.mask_token_id,) * (q - 1),
                     tuple(obs.input_ids[b]))
        expect_equal(f"request {b} draft positions", tuple(range(n, n + q)), tuple(obs.positions[b]))
        expect_equal(f"request {b} draft KV slots", tuple(obs.row_slots[b][:q]), tuple(obs.cache_locs[b]))
        expect_equal(f"request {b} drafts", case.gamma, len(obs.draft_tokens[b]))


@contract("DRAFT-002", "the commit writes the target features of exactly the committed columns (col < commit_len) into "
          "the draft context, each verify row's own features at its position n + col; no rejected column is written",
          requires={DRAFT}, cases=draft_cases)
def commit_writes_committed_columns(engine, case):
    obs = engine.draft_step(case)
    T = case.gamma + 1
    for b, (n, c) in enumerate(zip(case.prefix_lens, case.commit_lens)):
        expect_equal(f"request {b} columns written (commit_len {c})", tuple(col < c for col in range(T)),
                     tuple(obs.inject_written[b]))
        # Positions of the columns written only: a rejected column writes nothing, so its position is never read.
        expect_equal(f"request {b} inject positions of the written columns", tuple(range(n, n + c)),
                     tuple(p for p, w in zip(obs.inject_positions[b], obs.inject_written[b]) if w))
        rows = [r for r, w in zip(obs.inject_rows[b], obs.inject_written[b]) if w]
        expect(rows == [b * T + col for col in range(c)], f"request {b} target features written",
               f"verify rows {[b * T + col for col in range(c)]}", rows)


@contract("DRAFT-003", "with an oracle drafter (it knows the target's greedy continuation) draft slot k is the target's "
          "greedy token at position n+k+1, and greedy verify accepts every draft: commit_len = gamma+1",
          requires={DRAFT_ORACLE}, cases=draft_cases)
def oracle_drafter_commits_all(engine, case):
    obs = engine.oracle_draft_verify(case)
    T = case.gamma + 1
    for b in range(case.bs):
        expect_equal(f"request {b} drafts (slot k = the target's greedy token at position n+k+1)",
                     tuple(obs.target_argmax[b][: case.gamma]), tuple(obs.draft_tokens[b]))
        expect_equal(f"request {b} correct_len", case.gamma, obs.correct_len[b])
        expect_equal(f"request {b} commit_len", T, obs.commit_len[b])

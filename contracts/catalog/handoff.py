"""PD-decode handoff contracts (SGLang 0.5.23 contracts A1-A8).

Seed bug: for DSPARK, `build_disagg_draft_input` fell through to None and the
first decode crashed on `None.prepare_for_decode`.
"""

from __future__ import annotations

import dataclasses

import torch

from contracts.checks import expect, expect_equal, expect_values
from contracts.protocol import HANDOFF
from contracts.registry import contract
from contracts.scenarios.handoff import observe_handoff
from contracts.strategies.handoff import SEED_CASE, handoff_cases

ALL = handoff_cases
OVERLAP = lambda: handoff_cases(overlap=True)  # noqa: E731
SEED_NO_OVERLAP = dataclasses.replace(SEED_CASE, enable_overlap=False)


def _observe(engine, case):
    obs = observe_handoff(engine, case)
    expect(obs.handoff_error is None, "handoff admission", "no exception", obs.handoff_error)
    expect(len(obs.rows) == case.bs and len(set(obs.rows)) == case.bs, "batch request-pool rows",
           f"{case.bs} distinct rows", obs.rows)
    return obs


def _draft_input(engine, case):
    obs = _observe(engine, case)
    expect(obs.draft_input is not None and obs.draft_input.is_draft_input, "batch.spec_info", "a draft input",
           obs.draft_input)
    return obs, obs.draft_input


def _resolved(obs):
    """What the first overlap decode resolved; a failure of an earlier stage is reported as itself."""
    expect(obs.first_decode_error is None, "prepare_for_decode (before the first-decode resolve)", "no exception",
           obs.first_decode_error)
    expect(obs.resolve_error is None, "first-decode resolve", "no exception", obs.resolve_error)
    return obs.resolved


@contract("HANDOFF-001", "after a PD handoff the decode batch holds a draft input (never None)",
          requires={HANDOFF}, cases=ALL, examples=(SEED_CASE, SEED_NO_OVERLAP))
def draft_input_present(engine, case):
    _draft_input(engine, case)


@contract("HANDOFF-002", "the handed-over first tokens become the bonus tokens, int64, in batch order",
          requires={HANDOFF}, cases=ALL, examples=(SEED_CASE,))
def bonus_preserved(engine, case):
    _, di = _draft_input(engine, case)
    expect_equal("draft_input.bonus_tokens", torch.tensor(case.bonus_tokens, dtype=torch.int64), di.bonus_tokens)


@contract("HANDOFF-003", "the decode side's committed lengths are, per request, its prompt plus its sampled tokens minus "
          "the pending last one (the first decode's anchor), computed by the engine from the handed-over requests, some "
          "of which carry earlier outputs (int64, batch order)",
          requires={HANDOFF}, cases=ALL, examples=(SEED_CASE,))
def seq_lens_preserved(engine, case):
    _, di = _draft_input(engine, case)
    expect_equal("draft_input.new_seq_lens", torch.tensor(case.seq_lens, dtype=torch.int64), di.new_seq_lens)


@contract("HANDOFF-004", "with overlap on, future_indices are the batch's req_pool_indices (the same tensor, not a copy)",
          requires={HANDOFF}, cases=OVERLAP, examples=(SEED_CASE,))
def future_indices_seeded(engine, case):
    obs, di = _draft_input(engine, case)
    expect(di.future_indices is not None, "draft_input.future_indices", obs.rows, None)
    expect_values("draft_input.future_indices", obs.rows, di.future_indices)
    expect(di.future_indices_is_req_pool_indices, "draft_input.future_indices is batch.req_pool_indices",
           "the same tensor (seeded from it, so filter_batch keeps them aligned)", "a copy")


@contract("HANDOFF-005", "with overlap on, no stale DSA IndexShare seed is claimed and none is resolved",
          requires={HANDOFF}, cases=OVERLAP, examples=(SEED_CASE,))
def no_stale_dsa_seed(engine, case):
    obs, di = _draft_input(engine, case)
    expect(not di.future_dsa_topk_indices_available, "draft_input.future_dsa_topk_indices_available", False, True)
    expect(_resolved(obs).dsa_topk_indices_is_none, "resolved dsa_topk_indices", None, "a tensor")


@contract("HANDOFF-006", "with overlap on, seq lens are published before the bonus is stashed, once each, for the handed-over rows",
          requires={HANDOFF}, cases=lambda: handoff_cases(overlap=True, min_bs=1), examples=(SEED_CASE,))
def publish_then_stash(engine, case):
    obs, _ = _draft_input(engine, case)
    rows = obs.rows
    expected = [("publish", rows, list(case.seq_lens)), ("stash", rows, list(case.bonus_tokens))]
    observed = [(e.op, e.indices, e.values) for e in obs.relay_events]
    expect(observed == expected, "relay calls", expected, observed)


@contract("HANDOFF-007", "with overlap on, the first-decode resolve returns exactly what was handed over, and no other relay row changes",
          requires={HANDOFF}, cases=OVERLAP, examples=(SEED_CASE,))
def relay_round_trip(engine, case):
    obs, _ = _draft_input(engine, case)
    resolved = _resolved(obs)
    seq_lens = list(case.seq_lens)
    expect_values("resolved seq_lens", seq_lens, resolved.seq_lens)
    if resolved.seq_lens_cpu is not None:
        expect_values("resolved seq_lens_cpu", seq_lens, resolved.seq_lens_cpu)
        expect_equal("resolved seq_lens_sum", sum(seq_lens), resolved.seq_lens_sum)
    expect_values("resolved bonus_tokens", list(case.bonus_tokens), resolved.bonus_tokens)
    for name, before in obs.relay_before.items():
        untouched = torch.ones(before.shape[0], dtype=torch.bool)
        untouched[obs.rows] = False
        expect_equal(f"{name} outside the handed-over rows", before[untouched], obs.relay_after[name][untouched])


@contract("HANDOFF-008", "with overlap off, the handoff causes no FutureMap traffic",
          requires={HANDOFF}, cases=lambda: handoff_cases(overlap=False), examples=(SEED_NO_OVERLAP,))
def no_relay_without_overlap(engine, case):
    obs, di = _draft_input(engine, case)
    expect(di.future_indices is None, "draft_input.future_indices", None, di.future_indices)
    observed = [(e.op, e.indices) for e in obs.relay_events]
    expect(observed == [], "relay calls", [], observed)
    for name, before in obs.relay_before.items():
        expect_equal(name, before, obs.relay_after[name])


@contract("HANDOFF-009", "an empty (DP-idle) handoff yields empty int64 state and touches no relay row",
          requires={HANDOFF}, cases=lambda: handoff_cases(max_bs=0))
def idle_touches_nothing(engine, case):
    obs, di = _draft_input(engine, case)
    empty = torch.zeros(0, dtype=torch.int64)
    expect_equal("draft_input.bonus_tokens", empty, di.bonus_tokens)
    expect_equal("draft_input.new_seq_lens", empty, di.new_seq_lens)
    for name, before in obs.relay_before.items():
        expect_equal(name, before, obs.relay_after[name])
    expect(obs.first_decode_error is None, "prepare_for_decode", "no exception", obs.first_decode_error)


@contract("HANDOFF-010", "the first decode step (prepare_for_decode) succeeds on the handed-over batch",
          requires={HANDOFF}, cases=ALL, examples=(SEED_CASE, SEED_NO_OVERLAP))
def first_decode_succeeds(engine, case):
    obs = _observe(engine, case)
    expect(obs.first_decode_error is None, "prepare_for_decode", "no exception", obs.first_decode_error)

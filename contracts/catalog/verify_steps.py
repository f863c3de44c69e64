"""Verify as a runner batches it: greedy and sampled requests in one batch, and the same requests over steps.

A request's result must not depend on what its companions are: a greedy row in a sampled batch reads no
randomness and gives its greedy result, a sampled row draws from its own seeded randomness whatever rows beside it
are greedy. Over consecutive steps the engine carries whatever per-request state it keeps (a generator, a seed
keyed by position): the session repeats from its seed, greedy rows stay greedy, and a step draws anew rather than
replaying the step before. The expectations are the engine's own single-kind calls on the same inputs, so no law
is restated here.
"""

from __future__ import annotations

import torch

from contracts.boundary.verify import VerifyCase
from contracts.catalog.verify import ACCEPT_FIELDS, _first_bad, _i64
from contracts.checks import expect
from contracts.protocol import VERIFY_MIXED
from contracts.registry import contract
from contracts.scenarios.verify import require_supported
from contracts.strategies.verify import build, verify_cases

MIXED = lambda: verify_cases(min_bs=2, mixed=True)  # noqa: E731
# 48 sampled rows near-uniform over 48 tokens: a step that replays the step before repeats every row's bonus, which
# independent draws do with probability about 48 ** -48.
FRESH_DRAWS = VerifyCase(bs=48, gamma=2, vocab=48, target_family="near_uniform", draft_family="near_uniform",
                         draft_mode="sampled", seed=7, dtype="float32")


def _inputs(engine, case):
    inputs = build(case)
    require_supported(engine, inputs)
    return inputs


def _rows_equal(what: str, got, want, rows: torch.Tensor, expected: str) -> None:
    for f in ACCEPT_FIELDS:
        mine, theirs = _i64(getattr(got, f)), _i64(getattr(want, f))
        _first_bad(rows & (mine != theirs), f"{what}: {f}", expected,
                   lambda b: f"{int(mine[b])}, {expected} {int(theirs[b])}")


@contract("VERIFY-013", "in a batch mixing greedy and sampled requests each greedy row gives the engine's greedy "
          "accept of the batch: a greedy row reads no randomness and no sampled companion", requires={VERIFY_MIXED},
          cases=MIXED)
def mixed_greedy_rows(engine, case):
    inputs = _inputs(engine, case)
    _rows_equal("greedy row of the mixed batch", engine.mixed_block(inputs, case.seed), engine.greedy_accept(inputs),
                inputs.greedy_mask.to(torch.bool), "greedy accept")


@contract("VERIFY-016", "in a batch mixing greedy and sampled requests each sampled row gives its sampled accept of "
          "the batch with the same seed: a sampled row's draws do not depend on its companions' kind",
          requires={VERIFY_MIXED}, cases=MIXED)
def mixed_sampled_rows(engine, case):
    inputs = _inputs(engine, case)
    _rows_equal("sampled row of the mixed batch", engine.mixed_block(inputs, case.seed),
                engine.sample_block(inputs, case.seed), ~inputs.greedy_mask.to(torch.bool), "sampled accept")


@contract("VERIFY-014", "the same requests over two consecutive steps: the session repeats exactly from its seed, "
          "its first step is the mixed batch alone, and its greedy rows give their greedy accept at every step",
          requires={VERIFY_MIXED}, cases=MIXED)
def consecutive_steps_repeat(engine, case):
    first = _inputs(engine, case)
    second = first.replace(prefix_lens=first.prefix_lens + 1)  # the next step: every position moved on
    greedy = first.greedy_mask.to(torch.bool)
    session = engine.consecutive_blocks([first, second], case.seed)
    again = engine.consecutive_blocks([first, second], case.seed)
    everyone = torch.ones(first.bs, dtype=torch.bool)
    for step, (a, b) in enumerate(zip(session, again), start=1):
        _rows_equal(f"step {step} of the session run again", b, a, everyone, "the first run's")
    _rows_equal("step 1 of the session", session[0], engine.mixed_block(first, case.seed), everyone,
                "the mixed batch alone")
    _rows_equal("greedy row at step 2", session[1], engine.greedy_accept(second), greedy, "greedy accept")


@contract("VERIFY-015", "consecutive steps draw anew: the same high-entropy sampled batch one position on does not "
          "replay the draws of the step before (48 near-uniform rows over 48 tokens; replaying by chance has "
          "probability about 48^-48)", requires={VERIFY_MIXED})
def consecutive_steps_draw_anew(engine):
    first = build(FRESH_DRAWS)
    session = engine.consecutive_blocks([first, first.replace(prefix_lens=first.prefix_lens + 1)], FRESH_DRAWS.seed)
    same = (_i64(session[1].bonus) == _i64(session[0].bonus)) & (_i64(session[1].correct_len) == _i64(session[0].correct_len))
    expect(int(same.sum()) < first.bs, "step 2's draws", "not every row's (correct_len, bonus) of step 1 again",
           f"all {first.bs} rows repeated step 1")

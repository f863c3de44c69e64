"""Verify/accept contracts: bookkeeping, greedy exactness, the accept rule, determinism, exact losslessness.

Engine-agnostic: every expectation is recomputed here from the inputs (greedy),
or measured from the engine's own decisions and integrated exactly
(`contracts.scenarios.verify.derived_block_law`), never read off the reference
engine. Conventions are the verify level's (`contracts.boundary.verify`).

Statistical (Monte-Carlo) contracts live in `verify_stats`.
"""

from __future__ import annotations

import dataclasses

import torch

from contracts import oracle  # float64 laws of the target alone (no engine code)
from contracts.boundary.verify import ValueCase, VerifyCase, VerifyInputs
from contracts.checks import expect, expect_equal
from contracts.protocol import (
    VERIFY,
    VERIFY_CAP_TRIM,
    VERIFY_CHAIN,
    VERIFY_DISTRIBUTIONS,
    VERIFY_FLOAT64,
    VERIFY_INJECTED_NOISE,
    VERIFY_PLACEHOLDERS,
)
from contracts.registry import contract
from contracts.scenarios.verify import (
    derived_block_law,
    first_draft_enumeration,
    first_token_law,
    markov_enumeration,
    require_supported,
    verify_step,
)
from contracts.strategies.verify import (
    CAPPED_ACCEPT,
    HALF_REJECTED,
    PER_ROW_CAPS,
    TIE_CASE,
    any_cases,
    build,
    build_dyadic,
    build_markov,
    dyadic_cases,
    markov_cases,
    verify_cases,
)

INJECTED = {VERIFY, VERIFY_INJECTED_NOISE}
# The exact laws: probe noise of 2**-200 and a 1e-9 tolerance need float64 arithmetic (verify.float64). An fp32/bf16
# engine skips them; its laws are held exactly where its arithmetic allows (VERIFY-001..012) and by the
# Monte-Carlo gate (LOSSLESS-003..005) otherwise.
EXACT_LAW_NEEDS = INJECTED | {VERIFY_FLOAT64, VERIFY_CHAIN}  # the coin-region derivation assumes the chain rule
LAW_ATOL = 1e-9
ALL = any_cases  # recipes at size, and small batches whose values are drawn (they shrink)
# 64 near-uniform rows over 64 tokens: the bonus of every row is close to a uniform draw.
HIGH_ENTROPY = VerifyCase(bs=64, gamma=2, vocab=64, target_family="near_uniform", draft_family="near_uniform",
                          draft_mode="sampled", seed=0)
EXACT_LAW = lambda: verify_cases(min_bs=1, max_bs=3, max_vocab=10, max_gamma=3, dtypes=("float64",))  # noqa: E731


def _i64(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.int64)


def _first_bad(bad: torch.Tensor, what: str, expected, observed_of) -> None:
    """Fail naming the first row where ``bad`` [bs] holds; ``observed_of(row)`` describes it."""
    __tracebackhide__ = True
    rows = bad.nonzero()
    if rows.numel():
        b = int(rows[0, 0])
        expect(False, f"{what} (row {b})", expected, observed_of(b))


def _leading(mask: torch.Tensor) -> torch.Tensor:
    return mask.to(torch.int64).cumprod(1).sum(1)


def _both_modes(engine, case):
    inputs = build(case)
    return inputs, [("greedy", verify_step(engine, inputs, "greedy")),
                    ("sampled", verify_step(engine, inputs, "block", seed=case.seed))]


@contract("VERIFY-001", "0 <= correct_len <= min(gamma, L-1), cap_trim >= 0, correct_len + cap_trim <= gamma, "
          "bonus in [0, V); commit_len = correct_len + 1 in [1, L] and new_seq_lens = prefix_lens + commit_len",
          requires={VERIFY}, cases=ALL, examples=(TIE_CASE, PER_ROW_CAPS))
def accept_bounds(engine, case):
    inputs, results = _both_modes(engine, case)
    lens, gamma = inputs.lens(), inputs.gamma
    for mode, r in results:
        c, trim, bonus = _i64(r.correct_len), _i64(r.cap_trim), _i64(r.bonus)
        row = lambda b: (f"correct_len={int(c[b])} cap_trim={int(trim[b])} bonus={int(bonus[b])} "  # noqa: E731
                         f"commit_len={int(r.commit_len[b])} L={int(lens[b])}")
        _first_bad((c < 0) | (c > torch.clamp(lens - 1, max=gamma)), f"{mode}: correct_len", "in [0, min(gamma, L-1)]", row)
        _first_bad((trim < 0) | (c + trim > gamma), f"{mode}: cap_trim", ">= 0 with correct_len + cap_trim <= gamma", row)
        _first_bad((bonus < 0) | (bonus >= inputs.vocab), f"{mode}: bonus", f"a token id in [0, {inputs.vocab})", row)
        commit = _i64(r.commit_len)
        _first_bad((commit != c + 1) | (commit < 1) | (commit > lens), f"{mode}: commit_len", "correct_len + 1, in [1, L]", row)
        _first_bad(_i64(r.new_seq_lens) != _i64(inputs.prefix_lens) + commit, f"{mode}: new_seq_lens",
                   "prefix_lens + commit_len", lambda b: f"{int(r.new_seq_lens[b])} (prefix {int(inputs.prefix_lens[b])})")


def _emitted_check(engine, case, what: str, region) -> None:
    """out_tokens against drafts[:correct_len] + [bonus] + [-1, ...], on the slots ``region(slot, c)`` selects."""
    inputs, results = _both_modes(engine, case)
    slot = torch.arange(inputs.gamma + 1)[None, :]
    padded = torch.cat([_i64(inputs.drafts), torch.full((inputs.bs, 1), -1)], 1)
    for mode, r in results:
        c = _i64(r.correct_len)[:, None]
        expected = torch.where(slot < c, padded, torch.where(slot == c, _i64(r.bonus)[:, None], -1))
        out = _i64(r.out_tokens)
        expect(out.shape == expected.shape, f"{mode}: out_tokens shape", list(expected.shape), list(out.shape))
        _first_bad(((out != expected) & region(slot, c)).any(1), f"{mode}: out_tokens", what,
                   lambda b: f"{out[b].tolist()} (drafts {inputs.drafts[b].tolist()}, correct_len {int(c[b])}, "
                             f"bonus {int(r.bonus[b])})")


@contract("VERIFY-002", "out_tokens is [bs, gamma+1] and its first commit_len slots hold the accepted drafts, then "
          "exactly one bonus (what the scheduler emits)", requires={VERIFY}, cases=ALL, examples=(TIE_CASE,))
def emitted_tokens(engine, case):
    _emitted_check(engine, case, "drafts[:correct_len] + [bonus] in the first commit_len slots", lambda slot, c: slot <= c)


@contract("VERIFY-010", "out_tokens past commit_len hold -1 placeholders, so a reader that trusts the row width "
          "never emits a rejected draft", requires={VERIFY, VERIFY_PLACEHOLDERS}, cases=ALL, examples=(TIE_CASE,))
def placeholder_slots(engine, case):
    _emitted_check(engine, case, "-1 in every slot past commit_len", lambda slot, c: slot > c)


def _argmax_as_computed(engine, logits: torch.Tensor) -> torch.Tensor:
    """The target argmax, ties to the lowest index, with ties as the engine's arithmetic sees them: an engine without
    verify.float64 computes in float32, where logits closer than its rounding are equal."""
    return oracle.lowest_argmax(logits if VERIFY_FLOAT64 in engine.capabilities else logits.to(torch.float32))


@contract("VERIFY-003", "greedy: correct_len is the longest draft prefix equal to the target argmax (ties to the lowest "
          "index), capped at L-1; the bonus is the target argmax at correct_len; where the engine counts the drafts past "
          "the cap (verify.cap-trim), cap_trim = raw - correct_len",
          requires={VERIFY}, cases=ALL, examples=(TIE_CASE,))
def greedy_decision(engine, case):
    inputs = build(case)
    require_supported(engine, inputs)
    r = engine.greedy_accept(inputs)
    pred = _argmax_as_computed(engine, inputs.target_logits)  # [bs, gamma+1]
    raw = _leading(_i64(inputs.drafts) == pred[:, :-1])
    capped = torch.minimum(raw, inputs.lens() - 1)
    bonus = pred.gather(1, capped[:, None])[:, 0]
    row = lambda b: (f"correct_len={int(r.correct_len[b])} bonus={int(r.bonus[b])} cap_trim={int(r.cap_trim[b])} "  # noqa: E731
                     f"(drafts {inputs.drafts[b].tolist()}, argmax {pred[b].tolist()}, L={int(inputs.lens()[b])})")
    _first_bad(_i64(r.correct_len) != capped, "greedy correct_len", "longest prefix equal to argmax, capped", row)
    _first_bad(_i64(r.bonus) != bonus, "greedy bonus", "target argmax at correct_len", row)
    if VERIFY_CAP_TRIM in engine.capabilities:  # DSpark's count of the drafts past the cap; others never see them
        _first_bad(_i64(r.cap_trim) != raw - capped, "greedy cap_trim", "raw - correct_len", row)


@contract("VERIFY-004", "greedy verify steps on a Markov target emit exactly the target's plain greedy continuation, "
          "whatever the drafts and caps; drafts equal to it are all accepted (commit_len = L)",
          max_examples=50, requires={VERIFY}, cases=lambda: markov_cases(max_gamma=6))
def greedy_is_plain_greedy_decoding(engine, case):
    target, draft, anchors = build_markov(case)
    bs, v, gamma = case.bs, case.vocab, case.gamma
    logits = target.log()
    nxt = _argmax_as_computed(engine, logits)  # [V]: plain greedy successor of each token
    want = gamma + 2
    plain = [anchors]
    for _ in range(want):
        plain.append(nxt[plain[-1]])
    plain = torch.stack(plain[1:], 1)  # [bs, want]
    gen = torch.Generator().manual_seed(case.seed)
    lens = None if case.verify_lens is None else torch.tensor(case.verify_lens, dtype=torch.int64)
    emitted = [[] for _ in range(bs)]
    last = anchors.clone()
    for _ in range(want):  # each step emits at least one token
        cand = [last]
        for _k in range(gamma):
            cand.append(torch.multinomial(draft[cand[-1]], 1, generator=gen)[:, 0])
        cand = torch.stack(cand, 1)
        probs = target[cand]
        inputs = VerifyInputs(cand, logits[cand], probs, None, torch.zeros(bs, gamma, dtype=torch.float64),
                              torch.ones(bs, v, dtype=torch.float64), lens, torch.zeros(bs, dtype=torch.bool),
                              torch.zeros(bs, dtype=torch.int64))
        r = verify_step(engine, inputs, "greedy")
        agree = _leading(cand[:, 1:] == nxt[cand[:, :-1]])  # drafts on the greedy path from `last`
        full = torch.minimum(inputs.lens(), torch.full((bs,), gamma + 1))
        _first_bad((agree == gamma) & (_i64(r.commit_len) != full), "commit_len when every draft is the greedy token",
                   "L (all drafts accepted)", lambda b: f"{int(r.commit_len[b])} (candidates {cand[b].tolist()})")
        for b in range(bs):
            emitted[b].extend(int(t) for t in r.out_tokens[b, : int(r.commit_len[b])])
        last = torch.tensor([e[-1] for e in emitted])
    for b in range(bs):
        expect(emitted[b][:want] == plain[b].tolist(), f"tokens emitted for sequence {b}",
               plain[b].tolist(), emitted[b][:want])


@contract("VERIFY-005", "sampling accept count is the longest prefix with q(d) > 0 and u*q(d) < p(d) (strict; q = 1 for a "
          "one-hot draft), capped at L-1; a capped row's bonus is the accepted draft d_L; where the engine counts the drafts "
          "past the cap (verify.cap-trim), cap_trim = raw - correct_len",
          requires=INJECTED, cases=dyadic_cases, examples=(CAPPED_ACCEPT,))
def accept_rule_exact(engine, case):
    inputs = build_dyadic(case)
    require_supported(engine, inputs)
    r = engine.sampling_accept(inputs)
    d = _i64(inputs.drafts)[:, :, None]
    p = inputs.target_probs[:, :-1].gather(2, d)[:, :, 0].to(torch.float64)
    q = torch.ones_like(p) if inputs.draft_probs is None else inputs.draft_probs.gather(2, d)[:, :, 0].to(torch.float64)
    u = inputs.coins.to(torch.float64)
    raw = _leading((q > 0) & (u * q < p))  # exact: all values are small dyadic fractions
    capped = torch.minimum(raw, inputs.lens() - 1)
    row = lambda b: (f"correct_len={int(r.correct_len[b])} cap_trim={int(r.cap_trim[b])} bonus={int(r.bonus[b])} "  # noqa: E731
                     f"(u={u[b].tolist()}, q(d)={q[b].tolist()}, p(d)={p[b].tolist()}, L={int(inputs.lens()[b])}, "
                     f"candidates {inputs.candidates[b].tolist()})")
    _first_bad(_i64(r.correct_len) != capped, "correct_len", "min(raw, L-1), raw = leading (q>0 and u*q < p)", row)
    if VERIFY_CAP_TRIM in engine.capabilities:
        _first_bad(_i64(r.cap_trim) != raw - capped, "cap_trim", "raw - correct_len", row)
    carried = _i64(inputs.candidates).gather(1, (capped + 1).clamp(max=inputs.gamma)[:, None])[:, 0]
    _first_bad((capped < raw) & (_i64(r.bonus) != carried), "bonus of a capped row", "the accepted draft d_L", row)


@contract("VERIFY-006", "mixed accept equals greedy accept on greedy_mask rows and sampling accept elsewhere, row by row",
          max_examples=50, requires=INJECTED, cases=lambda: any_cases(mixed=True), examples=(TIE_CASE,))
def mixed_selects_per_row(engine, case):
    inputs = build(case)
    require_supported(engine, inputs)
    mixed, greedy, sampled = engine.mixed_accept(inputs), engine.greedy_accept(inputs), engine.sampling_accept(inputs)
    m = inputs.greedy_mask
    for field in ("correct_len", "bonus", "cap_trim"):
        want = torch.where(m, _i64(getattr(greedy, field)), _i64(getattr(sampled, field)))
        got = _i64(getattr(mixed, field))
        _first_bad(got != want, f"mixed {field}", "greedy where greedy_mask, else sampling",
                   lambda b: f"{int(got[b])}, expected {int(want[b])} (greedy_mask={bool(m[b])})")


def _same(what: str, a, b, fields) -> None:
    for f in fields:
        expect_equal(f"{what}.{f}", getattr(a, f), getattr(b, f))


ACCEPT_FIELDS = ("correct_len", "bonus", "cap_trim")
COMMIT_FIELDS = ("commit_len", "new_seq_lens", "out_tokens")


@contract("VERIFY-007", "same inputs and seed give bit-identical results: greedy accept, finalize, and sample_block "
          "with the engine's own randomness", max_examples=50, requires={VERIFY}, cases=ALL)
def deterministic(engine, case):
    # The high-entropy batch rides along so that randomness leaking past the seed shows on every example
    # (a small case may have too few random bonuses to reveal it reliably, which would make the
    # failure flaky).
    for name, inputs in (("case", build(case)), ("high-entropy batch", build(HIGH_ENTROPY))):
        for mode in ("greedy", "block"):
            a, b = verify_step(engine, inputs, mode, case.seed), verify_step(engine, inputs, mode, case.seed)
            _same(f"{name}, {mode} (run 2 vs run 1)", a.accept, b.accept, ACCEPT_FIELDS)
            _same(f"{name}, {mode} (run 2 vs run 1)", a.commit, b.commit, COMMIT_FIELDS)


def _unrelated(case):
    """Another batch of the same vocabulary and gamma."""
    if isinstance(case, ValueCase):
        # Other values in every field (rows reversed, ids moved on, the vocabulary rotated, logits doubled, coins
        # mirrored, greedy flipped), so a result that leaks across rows (a batch-wide max or sum) differs.
        V = case.vocab
        flip = lambda rows: tuple(reversed(rows))  # noqa: E731
        rotate = lambda row: row[1:] + row[:1]  # noqa: E731
        return dataclasses.replace(
            case, candidates=tuple(tuple((c + 1) % V for c in row) for row in flip(case.candidates)),
            logits=tuple(tuple(tuple(2 * x for x in rotate(col)) for col in row) for row in flip(case.logits)),
            coins_sixteenths=tuple(tuple(15 - c for c in row) for row in flip(case.coins_sixteenths)),
            verify_lens=None if case.verify_lens is None else flip(case.verify_lens),
            draft_eighths=None if case.draft_eighths is None else tuple(
                tuple(rotate(col) for col in row) for row in flip(case.draft_eighths)),
            greedy=None if case.greedy is None else tuple(not g for g in flip(case.greedy)))
    return dataclasses.replace(case, seed=case.seed + 1)


def _batch_independent(engine, case, modes) -> None:
    inputs = build(case)
    gen = torch.Generator().manual_seed(case.seed ^ 0x5EED)
    perm = torch.randperm(inputs.bs, generator=gen)
    other = build(_unrelated(case))
    # Alone; permuted; appended after an unrelated batch.
    layouts = [(inputs.rows(perm), perm), (VerifyInputs.cat([other, inputs]), None)]
    for mode in modes:
        alone = verify_step(engine, inputs, mode)
        for batch, order in layouts:
            got = verify_step(engine, batch, mode)
            index = order if order is not None else torch.arange(inputs.bs)
            for half, fields in (("accept", ACCEPT_FIELDS), ("commit", COMMIT_FIELDS)):
                for f in fields:
                    mine = getattr(getattr(got, half), f)
                    mine = mine[other.bs:] if order is None else mine
                    want = getattr(getattr(alone, half), f)[index]
                    where = "permuted batch" if order is not None else "after other rows"
                    _first_bad((_i64(mine) != _i64(want)).reshape(inputs.bs, -1).any(1), f"{mode} {f} in a {where}",
                               "the row's result when verified alone",
                               lambda b: f"{mine[b].tolist()}, alone {want[b].tolist()}")


@contract("VERIFY-008", "greedy accept and finalize: a row's result depends only on the row, not on its batch companions "
          "or position", requires={VERIFY}, cases=lambda: any_cases(min_bs=1))
def greedy_batch_independent(engine, case):
    _batch_independent(engine, case, ("greedy",))


@contract("VERIFY-009", "sampling and mixed accept with injected randomness: a row's result depends only on the row "
          "(inputs, coins, noise), not on its batch companions or position",
          max_examples=50, requires=INJECTED, cases=lambda: any_cases(min_bs=1))
def sampling_batch_independent(engine, case):
    _batch_independent(engine, case, ("sampling", "mixed"))


@contract("LOSSLESS-001", "one step, exact: the law of the first emitted token, integrated over the coin and resample "
          "noise from the engine's own decisions, equals the target row p_0 within 1e-9 (sampled or one-hot drafts, "
          "caps included)", requires=EXACT_LAW_NEEDS, cases=EXACT_LAW, max_examples=15, examples=(HALF_REJECTED,))
def first_token_lossless(engine, case):
    inputs = build(case)
    laws = derived_block_law(engine, first_draft_enumeration(inputs))
    for b in range(inputs.bs):
        law = first_token_law(laws[b], inputs.vocab)
        p = inputs.target_probs[b, 0].to(torch.float64)
        err = float((law - p).abs().max())
        expect(err <= LAW_ATOL, f"law of the first emitted token (row {b})", [round(x, 12) for x in p.tolist()],
               f"{[round(x, 12) for x in law.tolist()]} (max error {err:.3g})")


@contract("LOSSLESS-002", "exact enumeration: with a Markov target and draft over a small vocabulary, the engine's block "
          "law (drafts enumerated, coins and noise integrated from its decisions), completed by plain target sampling, "
          "equals the target's own law of gamma+1 tokens (TV <= 1e-9)",
          requires=EXACT_LAW_NEEDS, max_examples=20,
          cases=lambda: markov_cases(max_bs=1, max_vocab=4, max_gamma=3, max_blocks=27,
                                     draft_families=("dense", "sparse", "one_hot", "ties", "zero_columns", "target_greedy")))
def block_lossless(engine, case):
    target, draft, anchors = build_markov(case)
    anchor = int(anchors[0])
    one_hot = case.draft_family in ("one_hot", "target_greedy")
    verify_len = None if case.verify_lens is None else case.verify_lens[0]
    law = derived_block_law(engine, markov_enumeration(target, draft, anchor, case.gamma, one_hot=one_hot,
                                                       verify_len=verify_len))[0]
    cond = oracle.markov(target)
    n = case.gamma + 1
    completed = oracle.complete_with_target(law, cond, (anchor,), n)
    exact = oracle.continuation_law(cond, (anchor,), n)
    tv = oracle.total_variation(completed, exact)
    worst = max(set(completed) | set(exact), key=lambda k: abs(completed.get(k, 0.0) - exact.get(k, 0.0)))
    expect(tv <= LAW_ATOL, "TV(completed block law, target law)", f"<= {LAW_ATOL}",
           f"{tv:.3g}; worst sequence {worst}: engine {completed.get(worst, 0.0):.6g}, target {exact.get(worst, 0.0):.6g}")


DISTRIBUTIONS = lambda: verify_cases(min_bs=1, max_bs=6, max_vocab=24, max_gamma=4)  # noqa: E731
# float32 rounding either way: engines hold the sampling settings (temperatures, top-p) in float32.
DIST_ATOL = {torch.float32: 2e-6, torch.float64: 2e-6}


@contract("VERIFY-011", "the sampling accept reads the target law softmax(logits/T) cut by top-k then top-p (renormalised, "
          "the crossing token kept) and the law each draft was drawn from, within the rounding of its float dtype; "
          "a one-hot draft is a point mass on its candidate", requires={VERIFY, VERIFY_DISTRIBUTIONS}, cases=DISTRIBUTIONS,
          max_examples=50)
def accept_reads_the_right_laws(engine, case):
    inputs = build(case)
    d = engine.accept_distributions(inputs)
    for name, got in (("target", d.target_probs), ("draft", d.draft_probs)):
        if got is not None:
            expect(got.dtype in DIST_ATOL, f"{name} probabilities dtype", "float32 or float64", got.dtype)
    p = d.target_probs.reshape(inputs.bs, inputs.gamma + 1, -1).to(torch.float64)
    bs, T, v = p.shape
    tol = DIST_ATOL[d.target_probs.dtype]
    for b, (t, k, top_p) in enumerate(inputs.sampling_settings()):
        law = oracle.sampling_law(inputs.target_logits[b].to(torch.float64), t, k, top_p)
        err = float((p[b] - law).abs().max())
        expect(err <= tol, f"target law of row {b} (T={t:g}, top_k={k}, top_p={top_p:g})",
               f"the oracle's within {tol:g}", f"max error {err:.3g}: {p[b, 0].tolist()} vs {law[0].tolist()}")
    if inputs.draft_probs is None:
        if d.draft_probs is not None:
            q = d.draft_probs.reshape(bs, inputs.gamma, -1).to(torch.float64)
            point = torch.nn.functional.one_hot(inputs.drafts.to(torch.int64), q.shape[-1]).to(torch.float64)
            expect_equal("one-hot draft law", point.tolist(), q.tolist())
        return
    q = d.draft_probs.reshape(bs, inputs.gamma, -1).to(torch.float64)
    err = float((q - inputs.draft_probs.to(torch.float64)).abs().max())
    tol = DIST_ATOL[d.draft_probs.dtype] * 4
    expect(err <= tol, "draft law the accept reads", f"the law the drafts were drawn from, within {tol:g}",
           f"max error {err:.3g}")


def _invalid_first_draft(case):
    """The case's batch with draft 1 set to the id V (outside the vocabulary) in every row, and the target and draft
    laws of the next position both on token 0: an unchecked id V reads a neighbour cell that favours acceptance.
    The id sits at a position whose out-of-range read stays inside the batch's tensors."""
    inputs = build(case)
    v = inputs.vocab
    cand = inputs.candidates.clone()
    cand[:, 1] = v
    point = torch.zeros(v, dtype=inputs.target_probs.dtype)
    point[0] = 1.0
    p = inputs.target_probs.clone()
    p[:, 1] = point
    logits = inputs.target_logits.clone()
    logits[:, 1] = torch.where(point > 0, 0.0, -torch.inf).to(logits.dtype)
    q = None
    if inputs.draft_probs is not None:
        q = inputs.draft_probs.clone()
        q[:, 1] = point
    return inputs.replace(candidates=cand, target_probs=p, target_logits=logits, draft_probs=q)


INVALID = lambda: verify_cases(min_bs=1, max_bs=16, max_vocab=16, max_gamma=4).filter(lambda c: c.gamma >= 2)  # noqa: E731


@contract("VERIFY-012", "a draft id outside [0, V) is never accepted: greedy and sampled accept stop before it "
          "(correct_len 0 when the first draft is invalid), or the engine refuses the batch with a ValueError "
          "naming the candidates", requires={VERIFY}, cases=INVALID, max_examples=30)
def invalid_draft_never_accepted(engine, case):
    inputs = _invalid_first_draft(case)
    for mode in ("greedy", "block"):
        for seed in (case.seed, case.seed + 1):
            try:
                r = verify_step(engine, inputs, mode, seed)
            except (ValueError, TypeError) as e:
                expect("candidates" in str(e), f"{mode}: refusal of the invalid draft id", "an error naming candidates",
                       f"{type(e).__name__}: {e}")
                break
            _first_bad(_i64(r.correct_len) > 0, f"{mode} (seed {seed}): correct_len with draft 1 = V = {inputs.vocab}",
                       "0 (the invalid draft is rejected)",
                       lambda b: f"{int(r.correct_len[b])} (bonus {int(r.bonus[b])}, candidates {inputs.candidates[b].tolist()})")

"""Verify/accept bugs: each patches a torch reference op the dispatcher calls on CPU tensors.

`dspark.verify.dispatch` looks `reference.<op>` up at call time, so patching the
`dspark.verify.reference` module is what the reference adapter sees. The
sampling mutants share one re-implementation of the chain sampler with a knob
per bug class, written apart from the reference so that it cannot inherit a fix.
"""

import torch

from dspark import sampling
from dspark import verify as dv
from dspark.verify import reference
from dspark.verify.results import AcceptOut, Finalized

from . import Mutant

_real_greedy = reference.greedy_accept
_real_finalize = reference.finalize
_real_noise = dv.draw_resample_noise
_real_select = reference.select_mixed


def _leading(mask):
    return mask.to(torch.int64).cumprod(1).sum(1)


def _sampling(*, strict=True, q_zero_rejected=True, residual=True, carry="draft", noise_rows=None, flat_gather=False,
              shared_coin=False, residual_on_full_accept=False):
    """A chain sampler with one bug switched on.

    strict: accept iff u*q < p (False: <=). q_zero_rejected: False accepts a draft the draft model gave 0.
    residual: False resamples from p, not max(p - q, 0). carry: "draft" (correct), "resample" (a capped row
    draws a new token instead of keeping d_L), "peek" (d_L is kept only if d_{L+1} also passed).
    noise_rows: a function of bs giving the noise row each request reads (a batch-position bug).
    flat_gather: p(d) and q(d) read through the flattened rows, unchecked, as a kernel without a bounds check does:
    an id V reads the next row's first column.
    shared_coin: every position tests its draft against the first position's coin.
    residual_on_full_accept: when every draft passes, the bonus is drawn from max(p_gamma - q_{gamma-1}, 0), not p_gamma.
    """

    def sampling_accept(candidates, target_probs, draft_probs, coins, resample_noise, verify_lens=None):
        bs, width = candidates.shape
        gamma = width - 1
        acc = reference.compute_dtype(target_probs, draft_probs)
        cand = candidates.to(torch.int64)
        drafts = cand[:, 1:]
        rows = torch.arange(bs)
        if flat_gather:
            v = target_probs.shape[-1]
            flat = lambda t, rows_per_req: torch.cat([t.reshape(-1), t.new_zeros(1)])[  # noqa: E731
                (rows[:, None] * rows_per_req + torch.arange(gamma)[None, :]) * v + drafts]
            p_d = flat(target_probs, width).to(acc)
            q_d = torch.ones_like(p_d) if draft_probs is None else flat(draft_probs, gamma).to(acc)
            drafts = drafts.clamp(max=v - 1)  # what the rest of the sampler reads stays in range
        else:
            p_d = target_probs[:, :gamma].gather(2, drafts[:, :, None])[:, :, 0].to(acc)
            q_d = torch.ones_like(p_d) if draft_probs is None else draft_probs.gather(2, drafts[:, :, None])[:, :, 0].to(acc)
        u = coins[:, :1].expand_as(coins).to(acc) if shared_coin else coins.to(acc)
        passes = (u * q_d < p_d) if strict else (u * q_d <= p_d)
        if q_zero_rejected:
            passes = passes & (q_d > 0)
        raw = _leading(passes)
        lens = torch.full_like(raw, width) if verify_lens is None else verify_lens.to(torch.int64)
        capped = torch.minimum(raw, lens - 1)
        p_k = target_probs[rows, raw].to(acc)
        k_q = raw.clamp(max=gamma - 1)
        if draft_probs is None:
            nxt = cand[rows, (raw + 1).clamp(max=gamma)]
            q_k = (torch.arange(p_k.shape[1])[None, :] == nxt[:, None]).to(acc)
        else:
            q_k = draft_probs[rows, k_q].to(acc)
        if not residual_on_full_accept:
            q_k = torch.where((raw < gamma)[:, None], q_k, 0.0)
        weights = (p_k - q_k).clamp_min(0) if residual else p_k
        weights = torch.where((weights > 0).any(1, keepdim=True), weights, p_k)
        noise = resample_noise if noise_rows is None else resample_noise[noise_rows(bs)]
        drawn = torch.argmax(weights * noise.to(acc), dim=1)
        carried = cand[rows, (capped + 1).clamp(max=gamma)]
        if carry == "draft":
            keep = capped < raw
        elif carry == "resample":
            keep = torch.zeros_like(raw, dtype=torch.bool)
        else:  # "peek": reads the acceptance of the draft after d_L
            keep = capped + 1 < raw
        return AcceptOut(capped.to(torch.int32), torch.where(keep, carried, drawn), (raw - capped).to(torch.int32))

    return sampling_accept


def _greedy_bonus_one_late(candidates, target_logits, verify_lens=None):
    out = _real_greedy(candidates, target_logits, verify_lens)
    pred = torch.argmax(target_logits, dim=-1)
    late = (out.correct_len.to(torch.int64) + 1).clamp(max=candidates.shape[1] - 1)
    return AcceptOut(out.correct_len, pred.gather(1, late[:, None])[:, 0], out.cap_trim)


def _greedy_ties_high(candidates, target_logits, verify_lens=None):
    # argmax over the vocabulary reversed: ties go to the highest index.
    pred = target_logits.shape[-1] - 1 - torch.argmax(target_logits.flip(-1), dim=-1)
    raw = _leading(candidates[:, 1:].to(torch.int64) == pred[:, :-1])
    capped = raw if verify_lens is None else torch.minimum(raw, verify_lens.to(torch.int64) - 1)
    return AcceptOut(capped.to(torch.int32), pred.gather(1, capped[:, None])[:, 0], (raw - capped).to(torch.int32))


def _greedy_lens_of_wrong_row(candidates, target_logits, verify_lens=None):
    return _real_greedy(candidates, target_logits, None if verify_lens is None else verify_lens.flip(0))


def _finalize_zero_placeholder(prefix_lens, drafts, accept):
    out = _real_finalize(prefix_lens, drafts, accept)
    return Finalized(out.commit_len, out.new_seq_lens, out.out_tokens.clamp_min(0))


def _finalize_bonus_one_slot_late(prefix_lens, drafts, accept):
    out = _real_finalize(prefix_lens, drafts, accept)
    tokens = out.out_tokens.clone()
    rows = torch.arange(tokens.shape[0])
    c = accept.correct_len.to(torch.int64)
    late = c + 1 < tokens.shape[1]
    tokens[rows[late], c[late] + 1] = tokens[rows[late], c[late]]  # the bonus lands past commit_len ...
    tokens[rows[late], c[late]] = drafts.to(tokens.dtype)[rows[late], c[late]]  # ... and a rejected draft is emitted
    return Finalized(out.commit_len, out.new_seq_lens, tokens)


def _finalize_anchor_not_committed(prefix_lens, drafts, accept):
    out = _real_finalize(prefix_lens, drafts, accept)
    return Finalized(out.commit_len - 1, out.new_seq_lens - 1, out.out_tokens)


def _select_mixed_inverted(greedy, sampled, greedy_mask):
    return _real_select(greedy, sampled, ~greedy_mask)


def _unseeded_noise(bs, vocab, *, generator=None, device=None, dtype=torch.float32):
    return _real_noise(bs, vocab, generator=None, device=device, dtype=dtype)  # ignores the caller's generator


_real_coins = dv.draw_coins


def _reseeded(draw):
    """Every draw from a generator freshly seeded with the caller's seed: a session replays its first step."""
    def drawn(*args, generator=None, **kw):
        return draw(*args, generator=None if generator is None else torch.Generator().manual_seed(generator.initial_seed()),
                    **kw)
    return drawn


def _noise_reseeded_every_step(mp):
    mp.setattr(dv, "draw_coins", _reseeded(_real_coins))
    mp.setattr(dv, "draw_resample_noise", _reseeded(_real_noise))


def _sampler(**bug):
    return lambda mp: mp.setattr(reference, "sampling_accept", _sampling(**bug))


def _unchecked_ids(mp):
    """No range check of the candidates, and a sampler that reads p(d), q(d) through flattened rows."""
    from dspark.verify import validate

    mp.setattr(validate, "token_range", lambda name, t, vocab: None)
    _sampler(flat_gather=True)(mp)


_real_target_probs = sampling.target_probs


def _temperature_ignored(logits, temperatures, top_ks, top_ps):
    return _real_target_probs(logits, [1.0] * len(temperatures), top_ks, top_ps)


def _top_p_drops_crossing_token(logits, temperatures, top_ks, top_ps):
    """Keep only the tokens whose running mass stays below top_p: the token that crosses it is cut too."""
    probs = _real_target_probs(logits, temperatures, top_ks, [1.0] * len(top_ps))
    for i, p in enumerate(top_ps):
        if p < 1:
            srt, order = torch.sort(probs[i], dim=-1, descending=True)
            keep = torch.cumsum(srt, -1) < p
            keep[..., 0] = True
            cut = torch.zeros_like(keep).scatter(-1, order, keep)
            probs[i] = torch.where(cut, probs[i], 0.0)
            probs[i] = probs[i] / probs[i].sum(-1, keepdim=True)
    return probs


MUTANTS = [
    Mutant("resample-from-p-not-residual", ("LOSSLESS-001", "LOSSLESS-002", "LOSSLESS-003", "LOSSLESS-004", "LOSSLESS-005",
                                            "LOSSLESS-006"),
           _sampler(residual=False)),
    Mutant("accept-with-less-or-equal", ("VERIFY-005",), _sampler(strict=False)),
    Mutant("zero-draft-probability-accepted", ("VERIFY-005",), _sampler(q_zero_rejected=False)),
    Mutant("capped-bonus-resampled", ("VERIFY-005", "LOSSLESS-001", "LOSSLESS-002", "LOSSLESS-004", "LOSSLESS-006"),
           _sampler(carry="resample")),
    Mutant("cap-peeks-at-next-draft", ("VERIFY-005", "LOSSLESS-002", "LOSSLESS-004", "LOSSLESS-006"), _sampler(carry="peek")),
    Mutant("one-coin-for-every-position", ("VERIFY-005", "LOSSLESS-002", "LOSSLESS-003", "LOSSLESS-004", "LOSSLESS-006"),
           _sampler(shared_coin=True)),
    Mutant("full-accept-bonus-from-a-residual", ("LOSSLESS-002", "LOSSLESS-003", "LOSSLESS-004", "LOSSLESS-006"),
           _sampler(residual_on_full_accept=True)),
    Mutant("noise-row-by-batch-position", ("VERIFY-009",), _sampler(noise_rows=lambda bs: torch.arange(bs).flip(0))),
    Mutant("greedy-bonus-one-row-late", ("VERIFY-003", "VERIFY-004"),
           lambda mp: mp.setattr(reference, "greedy_accept", _greedy_bonus_one_late)),
    Mutant("greedy-ties-to-highest-index", ("VERIFY-003", "VERIFY-004"),
           lambda mp: mp.setattr(reference, "greedy_accept", _greedy_ties_high)),
    Mutant("greedy-cap-of-another-row", ("VERIFY-001", "VERIFY-008"),
           lambda mp: mp.setattr(reference, "greedy_accept", _greedy_lens_of_wrong_row)),
    Mutant("placeholder-zero-not-minus-one", ("VERIFY-010",),
           lambda mp: mp.setattr(reference, "finalize", _finalize_zero_placeholder)),
    Mutant("bonus-one-slot-late", ("VERIFY-002",),
           lambda mp: mp.setattr(reference, "finalize", _finalize_bonus_one_slot_late)),
    Mutant("commit-forgets-the-bonus", ("VERIFY-001",),
           lambda mp: mp.setattr(reference, "finalize", _finalize_anchor_not_committed)),
    Mutant("mixed-mask-inverted", ("VERIFY-006", "VERIFY-013", "VERIFY-016"),
           lambda mp: mp.setattr(reference, "select_mixed", _select_mixed_inverted)),
    Mutant("draft-ids-unchecked-flat-read", ("VERIFY-012",), _unchecked_ids),
    Mutant("target-temperature-not-applied", ("VERIFY-011", "LOSSLESS-005"),
           lambda mp: mp.setattr(sampling, "target_probs", _temperature_ignored)),
    Mutant("top-p-drops-the-crossing-token", ("VERIFY-011",),
           lambda mp: mp.setattr(sampling, "target_probs", _top_p_drops_crossing_token)),
    Mutant("sample-block-noise-unseeded", ("VERIFY-007", "VERIFY-014"),
           lambda mp: mp.setattr(dv, "draw_resample_noise", _unseeded_noise)),
    Mutant("noise-reseeded-every-step", ("VERIFY-015",), _noise_reseeded_every_step),
]

"""Decode-loop bugs: an unpredictable verify cap, a wrong resample law, off-by-one commits, a silent relay, row-keyed RNG,
laws the accept scores with that are not the ones sampled, a planner that never runs, a PD decode that stops
speculating, and a draft context fed its neighbour column's features."""

import torch

from dspark import disaggregation, overlap_utils, sampling, verify
from dspark.engine import DSparkEngine
from dspark.engine_types import SamplingParams
from dspark.mem_cache import DraftContextPool
from dspark.verify import AcceptOut, Finalized

from . import Mutant

_real_plan = DSparkEngine.plan_verify_lens
_real_mixed = verify.mixed_accept
_real_greedy = verify.greedy_accept
_real_finalize = verify.finalize
_real_publish = DSparkEngine._publish
_real_truncate = DSparkEngine._truncate
_real_builder = disaggregation.build_dspark_disagg_draft_input
_real_target_probs = DSparkEngine._target_probs
_real_admit = DSparkEngine._admit
_real_append = DraftContextPool.append


def _look_ahead_cap(self, proposal):
    """Stop each block right before its first draft equal to token 0: {L >= k+1} then depends on d_{k+1}."""
    lens, budget, planned, read = _real_plan(self, proposal)
    bs, gamma = proposal.draft_tokens.shape
    base = torch.full((bs,), gamma + 1, dtype=torch.int64) if lens is None else lens
    zero = proposal.draft_tokens == 0
    first_zero = torch.where(zero.any(1), zero.to(torch.int64).argmax(1) + 1, gamma + 1)  # 1-based
    return torch.minimum(base, (first_zero - 1).clamp(min=1)), budget, planned, read


def _resample_from_p(candidates, target_logits, target_probs, draft_probs, coins, resample_noise, greedy_mask,
                     verify_lens=None, **kw):
    acc = _real_mixed(candidates, target_logits, target_probs, draft_probs, coins, resample_noise, greedy_mask,
                      verify_lens, **kw)
    rows = torch.arange(candidates.shape[0])
    n = acc.correct_len.to(torch.int64)
    from_p = torch.argmax(target_probs[rows, n] * resample_noise, dim=-1)
    rejected = (n < candidates.shape[1] - 1) & (acc.cap_trim == 0) & ~greedy_mask
    return AcceptOut(acc.correct_len, torch.where(rejected, from_p, acc.bonus), acc.cap_trim)


def _emit_rejected_draft(acc: AcceptOut, candidates):
    n = acc.correct_len.to(torch.int64)
    gamma = candidates.shape[1] - 1
    rejected = candidates.gather(1, (n + 1).clamp(max=gamma)[:, None])[:, 0]
    return AcceptOut(acc.correct_len, torch.where(n < gamma, rejected, acc.bonus), acc.cap_trim)


def _greedy_emits_draft(candidates, target_logits, verify_lens=None, **kw):
    return _emit_rejected_draft(_real_greedy(candidates, target_logits, verify_lens, **kw), candidates)


def _mixed_emits_draft(candidates, target_logits, target_probs, draft_probs, coins, resample_noise, greedy_mask,
                       verify_lens=None, **kw):
    acc = _real_mixed(candidates, target_logits, target_probs, draft_probs, coins, resample_noise, greedy_mask,
                      verify_lens, **kw)
    bad = _emit_rejected_draft(acc, candidates)
    return AcceptOut(acc.correct_len, torch.where(greedy_mask, bad.bonus, acc.bonus), acc.cap_trim)


def _seq_len_counts_bonus(prefix_lens, drafts, accept, **kw):
    fin = _real_finalize(prefix_lens, drafts, accept, **kw)
    return Finalized(fin.commit_len, fin.new_seq_lens + 1, fin.out_tokens)


def _stash_without_publish(self, new_seq_lens, bonus, confidence):
    if not self.enable_overlap:
        return _real_publish(self, new_seq_lens, bonus, confidence)
    di = self.batch.spec_info
    from dspark.overlap_utils import RelayPayload

    self.future_map.stash(di.future_indices, RelayPayload(bonus_tokens=bonus))  # seq lens never published


def _rejection_emits_nothing(self, st, emitted):
    if len(emitted) == 1 and st.local_step > 0:  # a decode step that accepted no draft
        emitted.clear()
    return _real_truncate(self, st, emitted)


def _unresolved_step_verifies_the_anchor(self, proposal):
    """With nothing resolved yet (no budget), verify the anchor only instead of everything."""
    lens, budget, planned, read = _real_plan(self, proposal)
    if lens is not None and budget is None:
        lens = torch.ones_like(lens)
    return lens, budget, planned, read


def _noise_keyed_by_row(self):
    g, V = self.gamma, self.vocab_size
    rows = range(len(self.rows))  # the batch row where the request id belongs
    return self._split_noise(self._uniforms(rows, [st.local_step + 1 for st in self.rows], g * V + g + V))


def _handoff_counts_anchor(batch, last_tokens_tensor, future_map):
    batch.seq_lens = batch.seq_lens + 1
    return _real_builder(batch, last_tokens_tensor, future_map)


def _draft_law_in_float32(self, logits, temps, params):
    """The draft law scored in float32 while the drafts were drawn in float64: off by float32 rounding."""
    probs = _real_target_probs(self, logits, temps, params)
    if all(p == SamplingParams() for p in params):  # the draft-law call
        return probs.to(torch.float32).to(torch.float64)
    return probs


def _draft_law_without_temperature(self, logits, temps, params):
    """q = softmax(logits), not softmax(logits / T): equal only at T = 1."""
    if all(p == SamplingParams() for p in params):
        return _real_target_probs(self, logits, torch.ones_like(temps), params)
    return _real_target_probs(self, logits, temps, params)


def _target_law_without_top_p(self, logits, temps, params):
    """Top-p dropped from the law the accept reads (the sampler keeps it): wrong only where top_p < 1."""
    return sampling.target_probs(logits, temps.tolist(), [p.top_k for p in params], [1.0] * len(params))


def _draft_law_truncated_like_the_target(self, logits, temps, params):
    """The request's top-k applied to q too, though the drafter drew from the untruncated law."""
    if all(p == SamplingParams() for p in params):
        params = [st.params for st in self.rows]
    return _real_target_probs(self, logits, temps, params)


def _pd_rows_stop_speculating(self, proposal):
    """After a PD handoff, planned steps verify the anchor only: right tokens, no speculation."""
    lens, budget, planned, read = _real_plan(self, proposal)
    if lens is None:
        lens = torch.full((len(planned),), self.T, dtype=torch.int64)
    pd = torch.tensor([getattr(st, "via_pd", False) and p for st, p in zip(self.rows, planned)])
    return torch.where(pd, 1, lens), budget, planned, read


def _admit_marking_pd(self, handoffs, *, prebuilt):
    _real_admit(self, handoffs, prebuilt=prebuilt)
    for st in self.rows:
        st.via_pd = getattr(st, "via_pd", False) or (prebuilt and st.rid in {h.rid for h in handoffs})


def _never_planned(self, proposal):
    """Every ragged step verifies all as if nothing were resolved yet: right tokens, a planner that never runs."""
    lens, budget, planned, read = _real_plan(self, proposal)
    if budget is None:
        return lens, budget, planned, read
    return torch.full((len(planned),), self.T, dtype=torch.int64), None, [False] * len(planned), None


def _top_k_rows_decode_greedily(self) -> bool:
    """Any top-k reads as greedy, not only top_k == 1: such a request is silently decoded greedily."""
    return self.temperature < 1e-6 or self.top_k >= 1


RING = 8  # the largest captured graph batch


def _relay_rows_wrap(self, name, indices):
    """The relay addressed modulo a ring of 8 rows: right until more than 8 requests are live at once."""
    from dspark import _validate

    _validate.int_tensor(name, indices)
    return (indices % RING).to(device=self.device, dtype=torch.int64)


def _context_gets_the_next_column(self, rows, hidden, counts):
    """The commit writes verify column j+1's features at position n+j: the right count, every row one column late."""
    return _real_append(self, rows, torch.roll(hidden, -1, dims=1), counts)


MUTANTS = [
    Mutant("look-ahead-verify-cap", ("DIST-001", "DIST-002"), lambda mp: mp.setattr(DSparkEngine, "plan_verify_lens", _look_ahead_cap)),
    Mutant("resample-from-p-not-residual", ("DIST-001",), lambda mp: mp.setattr(verify, "mixed_accept", _resample_from_p)),
    Mutant("greedy-bonus-is-the-rejected-draft", ("LOOP-001",),
           lambda mp: (mp.setattr(verify, "greedy_accept", _greedy_emits_draft),
                       mp.setattr(verify, "mixed_accept", _mixed_emits_draft))),
    Mutant("new-seq-len-counts-the-bonus", ("LOOP-002",), lambda mp: mp.setattr(verify, "finalize", _seq_len_counts_bonus)),
    Mutant("overlap-relay-not-published", ("LOOP-002",),
           lambda mp: mp.setattr(DSparkEngine, "_publish", _stash_without_publish)),
    Mutant("handoff-seq-len-counts-the-anchor", ("LOOP-002",),
           lambda mp: mp.setattr(disaggregation, "build_dspark_disagg_draft_input", _handoff_counts_anchor)),
    Mutant("unresolved-step-verifies-the-anchor-only", ("LOOP-003",),
           lambda mp: mp.setattr(DSparkEngine, "plan_verify_lens", _unresolved_step_verifies_the_anchor)),
    Mutant("rejected-step-emits-nothing", ("LOOP-004",), lambda mp: mp.setattr(DSparkEngine, "_truncate", _rejection_emits_nothing)),
    Mutant("sampling-rng-keyed-by-batch-row", ("LOOP-005",), lambda mp: mp.setattr(DSparkEngine, "_noise", _noise_keyed_by_row)),
    Mutant("draft-law-scored-in-float32", ("LOOP-006",),
           lambda mp: mp.setattr(DSparkEngine, "_target_probs", _draft_law_in_float32)),
    Mutant("draft-law-without-temperature", ("LOOP-006", "DIST-002"),
           lambda mp: mp.setattr(DSparkEngine, "_target_probs", _draft_law_without_temperature)),
    Mutant("target-law-without-top-p", ("LOOP-006",),
           lambda mp: mp.setattr(DSparkEngine, "_target_probs", _target_law_without_top_p)),
    Mutant("draft-law-truncated-like-the-target", ("LOOP-006",),
           lambda mp: mp.setattr(DSparkEngine, "_target_probs", _draft_law_truncated_like_the_target)),
    Mutant("top-k-rows-decode-greedily", ("LOOP-006",),
           lambda mp: mp.setattr(SamplingParams, "is_greedy", property(_top_k_rows_decode_greedily))),
    Mutant("relay-rows-wrap-at-the-ring-size", ("LOOP-002",),
           lambda mp: mp.setattr(overlap_utils.FutureMap, "_rows", _relay_rows_wrap)),
    Mutant("ragged-steps-never-planned", ("LOOP-003", "LOOP-007"),
           lambda mp: mp.setattr(DSparkEngine, "plan_verify_lens", _never_planned)),
    Mutant("draft-context-gets-the-next-column", ("LOOP-008",),
           lambda mp: mp.setattr(DraftContextPool, "append", _context_gets_the_next_column)),
    Mutant("pd-decode-stops-speculating", ("LOOP-007",),
           lambda mp: (mp.setattr(DSparkEngine, "plan_verify_lens", _pd_rows_stop_speculating),
                       mp.setattr(DSparkEngine, "_admit", _admit_marking_pd))),
]

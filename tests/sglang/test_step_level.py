"""The `step` level on SGLang: its real Scheduler and DSparkWorkerV2, one scheduler iteration per step.

Runs only where sglang 0.5.23 is installed. The first test holds the level to an exact oracle of its own (the
models are functions of the last token, so the tokens and every accept length follow from the two successor
tables); the second puts a bug back into SGLang's accept and checks the decode-loop machine's own greedy check
catches it. The machine reads the pack's capabilities and stays within them (local admission, overlap fixed per
engine: no step.pd-handoff or step.overlap-toggle; static and the ragged modes, step.ragged).
"""

from __future__ import annotations

import pytest

from contracts import machine as machine_module
from contracts.boundary.engine import EngineSpec, RequestSpec
from contracts.violation import Mismatch
from tests.caught import guarded_patches


def oracle(models, prompt, max_new, gamma):
    """Greedy speculative decoding of the step level's models: (tokens, commit length per decode step)."""
    out, commits = [models.greedy[prompt[-1]]], []
    while len(out) < max_new:
        block = [out[-1]]
        for _ in range(gamma):
            block.append(models.draft_greedy[block[-1]])
        k = 0
        while k < gamma and block[k + 1] == models.greedy[block[k]]:
            k += 1
        commit = block[1: k + 1] + [models.greedy[block[k]]]
        commits.append(len(commit))
        out += commit
    return out[:max_new], commits


REQUESTS = (RequestSpec(0, (1, 2, 3), 0.0, 9), RequestSpec(1, (4,), 0.0, 6), RequestSpec(2, (5, 6), 0.0, 12),
            RequestSpec(3, (0,), 0.7, 5))  # one sampled row rides along: its tokens are SGLang's draws


@pytest.mark.parametrize("overlap", [False, True], ids=["no-overlap", "overlap"])
@pytest.mark.parametrize("drafter, gamma", [("vanilla", 3), ("oracle", 2), ("random", 4)])
def test_step_level_matches_the_exact_oracle(sglang_engine, overlap, drafter, gamma):
    spec = EngineSpec(vocab_size=8, gamma=gamma, drafter=drafter, enable_overlap=overlap, model_seed=1)
    eng = sglang_engine
    h = eng.new_engine(spec)
    eng.add_requests(h, REQUESTS, "local")
    models = h.models
    want = {r.rid: oracle(models, r.prompt, r.max_new_tokens, gamma) for r in REQUESTS if r.greedy}
    commits = {rid: [] for rid in want}
    for step in range(20):
        if not any(v.live for v in eng.request_views(h)):
            break
        view = eng.step(h)
        assert all(L == gamma + 1 for L in view.verify_lens)
        for rid, c, e, n, s0, s1 in zip(view.rids, view.commit_lens, view.emitted, view.correct_lens, view.seq_lens,
                                       view.new_seq_lens):
            assert c == n + 1 and s1 == s0 + c
            if rid in commits:
                commits[rid].append(c)
        for v in eng.request_views(h):
            if v.live:  # the target's KV cache, read from SGLang's pool: the committed sequence without the anchor
                full = list(v.prompt) + v.output
                assert v.cache_tokens == full[:-1] and v.seq_len == len(full) - 1 and v.bonus == full[-1]
    views = {v.rid: v for v in eng.request_views(h)}
    assert not any(v.live for v in views.values())
    for rid, (tokens, accepts) in want.items():
        assert views[rid].output == tokens, (rid, views[rid].output, tokens)
        # The last step may commit past max_new_tokens (SGLang truncates the output, not the commit).
        assert commits[rid][:-1] == accepts[:-1] and commits[rid][-1] >= accepts[-1], (rid, commits[rid], accepts)
        assert views[rid].finish_reason == "length"
    sampled = views[3]
    assert len(sampled.output) == 5 and all(0 <= t < spec.vocab_size for t in sampled.output)


def test_abort_and_a_later_admission_keep_the_rows_apart(sglang_engine):
    eng = sglang_engine
    h = eng.new_engine(EngineSpec(vocab_size=5, gamma=3, drafter="vanilla", model_seed=2))
    eng.add_requests(h, [RequestSpec(0, (1,), 0.0, 10), RequestSpec(1, (2, 3), 0.0, 10)], "local")
    eng.step(h)
    eng.abort(h, 0)
    eng.add_requests(h, [RequestSpec(2, (4,), 0.0, 7)], "local")
    view = eng.step(h)
    assert sorted(view.rids) == [1, 2]
    while any(v.live for v in eng.request_views(h)):
        eng.step(h)
    views = {v.rid: v for v in eng.request_views(h)}
    assert views[0].finish_reason == "abort"
    for rid in (1, 2):
        r = [RequestSpec(1, (2, 3), 0.0, 10), RequestSpec(2, (4,), 0.0, 7)][rid - 1]
        assert views[rid].output == oracle(h.models, r.prompt, r.max_new_tokens, 3)[0]
    eng.new_engine(EngineSpec(vocab_size=5, gamma=3, drafter="vanilla", model_seed=2))  # reset: every row freed


# ---- the machine within the pack's limits -----------------------------------------------------------------------


def run_limited(engine, families, max_examples):
    machine_module.run_decode_loop(engine, families, max_examples=max_examples, steps=8)


def test_the_machine_passes_on_intact_sglang(sglang_engine):
    """Every family whose contract SGLang's ledger does not list (LOOP-003 meets PLAN-010's cause in compact mode)."""
    run_limited(sglang_engine, machine_module.unlisted_families(sglang_engine), max_examples=8)


def _bonus_replaced_by_the_rejected_draft(mp):
    """The accept commits the first rejected draft where the target's correction (the bonus) belongs."""
    import torch
    from sglang.srt.speculative.dspark_components import dspark_verify

    real = dspark_verify.build_accept_outs

    def build_accept_outs(*, correct_len, bonus, draft_tokens, gamma, **kwargs):
        rows = torch.arange(correct_len.shape[0])
        at = correct_len.to(torch.int64).clamp(max=gamma - 1)
        drafts = draft_tokens.reshape(correct_len.shape[0], -1)[:, -gamma:]
        wrong = torch.where(correct_len < gamma, drafts[rows, at].to(bonus.dtype), bonus)
        return real(correct_len=correct_len, bonus=wrong, draft_tokens=draft_tokens, gamma=gamma, **kwargs)

    mp.setattr(dspark_verify, "build_accept_outs", build_accept_outs)


def test_a_reinserted_accept_bug_is_caught_by_the_greedy_check(sglang_engine):
    """Static verify's programs, seeded: the pinned program (compact verify at a forced fraction 0.25) emits the same
    tokens with this bug in, so it no longer catches it before the drawn programs do."""
    from hypothesis import strategies as st

    static = st.sampled_from([s for s in machine_module.MACHINE_SPECS if s.verify_mode == "static"])
    with guarded_patches() as mp, machine_module.seeded(20261206):
        _bonus_replaced_by_the_rejected_draft(mp)
        with pytest.raises(Mismatch) as caught:
            machine_module.run_decode_loop(sglang_engine, ("greedy",), specs=static, max_examples=20, steps=8)
    # The machine's own greedy check, not an engine exception, on a shrunk step program.
    assert caught.value.what.startswith("greedy request"), str(caught.value)
    assert "state.start(" in str(caught.value.observed), caught.value.observed

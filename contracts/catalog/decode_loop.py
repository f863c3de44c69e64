"""Decode-loop contracts: the whole engine, step after step (design notes section 7, invariants 1-5, 11, 14).

LOOP-001..004 run the stateful machine in `contracts.machine` (requests join by
local prefill or PD handoff, steps, aborts, overlap toggles); a failure prints
the shrunk step program that replays it. LOOP-005 runs whole generations
twice. DIST-001 is statistical: spec-decoded n-grams against the exact target
law.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from hypothesis import strategies as st

from contracts import budget, oracle, stats
from contracts.boundary.engine import EngineSpec, LoopCase, RequestSpec
from contracts.checks import expect, expect_equal
from contracts.machine import drain, engine_specs, join_via, run_decode_loop, single_thread
from contracts.protocol import STEP, STEP_DRAFT_CONTEXT, STEP_LAWS, STEP_PD, STEP_SEEDED_SAMPLING
from contracts.registry import contract
from contracts.step_modes import law_configs
from contracts.strategies.engine import law_cases, loop_cases, request_specs

MACHINE_EXAMPLES, MACHINE_STEPS = 40, 10
MAX_STEPS = 200  # a whole generation never needs more (max_new_tokens <= 10 per request)


@contract("LOOP-001", "greedy rows emit exactly the target's plain greedy decoding, token for token, whatever the drafter, "
          "gamma, verify mode, budget, overlap, PD handoff or batch mix", requires={STEP})
def greedy_equivalence(engine):
    run_decode_loop(engine, ("greedy",), max_examples=MACHINE_EXAMPLES, steps=MACHINE_STEPS)


@contract("LOOP-002", "bookkeeping: new_seq_len = seq_len + commit_len; the target cache is the committed sequence without "
          "the pending anchor; draft context length == seq_len; every emitted token lands once, across PD handoff and relay",
          requires={STEP})
def bookkeeping(engine):
    run_decode_loop(engine, ("bookkeeping",), max_examples=MACHINE_EXAMPLES, steps=MACHINE_STEPS)


@contract("LOOP-003", "per step: 1 <= L <= gamma+1, commit_len = correct_len+1 <= L, sum(L - max(min,1)) <= budget "
          "<= planned*gamma (floor(f*planned*gamma) when forced); static steps and steps without a budget (nothing "
          "resolved yet) verify all (on an engine whose drafter cuts its own block, step.self-truncating, a static "
          "step verifies the cut)", requires={STEP})
def step_planner(engine):
    run_decode_loop(engine, ("planner",), max_examples=MACHINE_EXAMPLES, steps=MACHINE_STEPS)


@contract("LOOP-004", "every step emits at least one token per live request, so a request ends within max_new_tokens steps",
          requires={STEP})
def progress(engine):
    run_decode_loop(engine, ("progress",), max_examples=MACHINE_EXAMPLES, steps=MACHINE_STEPS)


def _outputs(engine, spec: EngineSpec, requests, via: str) -> dict:
    handle = engine.new_engine(spec)
    engine.add_requests(handle, list(requests), via)
    drain(engine, handle, MAX_STEPS)
    return {v.rid: v.output for v in engine.request_views(handle)}


@contract("LOOP-005", "in static mode a request's tokens depend only on (seed, request id, prompt, params): not on its batch "
          "row, its companions (a sampled one among them), overlap scheduling, or PD handoff vs local prefill (where the "
          "engine admits PD handoffs); sampled requests are held to it where the engine keys its randomness per request "
          "(step.seeded-sampling), greedy ones always",
          requires={STEP}, cases=lambda: loop_cases(verify_mode="static"), max_examples=20)
def batch_invariance(engine, case: LoopCase):
    if STEP_SEEDED_SAMPLING not in engine.capabilities:  # its sampled rows draw from a batch-wide stream: only greedy
        case = replace(case, requests=tuple(replace(r, temperature=0.0) for r in case.requests))
    via = join_via(engine, "pd")
    with single_thread():
        alone = {}
        for r in case.requests:
            alone.update(_outputs(engine, case.spec, [r], join_via(engine, "local")))
        companion = RequestSpec(1000, (0,), 1.0, 6)
        flipped = replace(case.spec, enable_overlap=not case.spec.enable_overlap)
        together = _outputs(engine, flipped, [companion] + list(reversed(case.requests)), via)
    for r in case.requests:
        expect_equal(f"request {r.rid} tokens (batched, reversed, overlap={flipped.enable_overlap}, {via}) vs alone",
                     alone[r.rid], together[r.rid])


LAW_TOL = 1e-9  # float64 laws; the engine and the oracle round differently
LAW_TOL_F32 = 1e-5  # an engine that computes its laws in float32 is held to float32 rounding, not to float64's


def _law_tol(t: torch.Tensor) -> float:
    return LAW_TOL if t.dtype == torch.float64 else LAW_TOL_F32


@contract("LOOP-006", "exact, every step: every sampled row reports what its accept read, and for each the target "
          "law its accept reads at each verified column is "
          "the request's own sampling law (softmax(logits/T), then top-k, then top-p) of the target's logits after the "
          "committed tokens and the candidates before the column, from the independent float64 oracle; each draft is "
          "the Gumbel-max draw argmax(logits/T + noise) from the drafter's logits, and the draft law the accept scores "
          "it with is softmax(logits/T), the law it was drawn from (exact to the precision the engine computes in; "
          "where the engine draws its noise out of reach, the draws are DIST-002's)", requires={STEP, STEP_LAWS},
          cases=law_cases, max_examples=30)
def verify_reads_the_sampled_laws(engine, case: LoopCase):
    handle = engine.new_engine(case.spec)
    engine.add_requests(handle, list(case.requests), join_via(engine, "pd"))
    sampled = {r.rid for r in case.requests if not r.greedy}
    for step in range(MACHINE_STEPS):
        if not any(v.live for v in engine.request_views(handle)):
            return
        view = engine.step(handle)
        lens = dict(zip(view.rids, view.verify_lens))
        laws = list(engine.step_laws(handle))
        # Each sampled row of the step owes one law (none reported would check nothing).
        expect_equal(f"step {step}: requests whose sampling laws the step reports",
                     sorted(rid for rid in view.rids if rid in sampled), sorted(law.rid for law in laws))
        for law in laws:
            where = f"step {step} request {law.rid}"
            for j in range(lens[law.rid]):
                logits = engine.target_next_logits(handle, list(law.context) + list(law.candidates[: j + 1]))
                want = oracle.sampling_law(logits, law.temperature, law.top_k, law.top_p)
                err = float((law.target_probs[j].to(torch.float64) - want).abs().max())
                expect(err <= _law_tol(law.target_probs), f"{where}: target law at column {j} (T={law.temperature}, top_k={law.top_k}, "
                       f"top_p={law.top_p})", [round(x, 9) for x in want.tolist()],
                       f"{[round(x, 9) for x in law.target_probs[j].tolist()]} (max error {err:.3g})")
            logits = law.draft_logits.to(torch.float64) / law.draft_temperature
            if law.draft_noise is not None:
                drawn = torch.argmax(logits + law.draft_noise.to(torch.float64), dim=-1).tolist()
                expect_equal(f"{where}: drafts vs argmax(draft logits / T + noise)", drawn, list(law.candidates[1:]))
            want_q = torch.softmax(logits, dim=-1)
            err = float((law.draft_probs.to(torch.float64) - want_q).abs().max())
            expect(err <= _law_tol(law.draft_probs), f"{where}: draft law the accept scores with", "softmax(draft logits / T), the law "
                   "the drafts were drawn from", f"max error {err:.3g} (draft probs {law.draft_probs.tolist()})")


@contract("LOOP-007", "liveness after a PD handoff: with an oracle drafter (every draft is the target's own greedy token) "
          "and greedy rows, every static-mode step commits gamma+1 tokens per request (or all it has left), and the "
          "planned steps of the other modes (min_verify_len 1, no forced fraction) commit more than one on average, so speculation "
          "never silently falls back to plain decoding", requires={STEP, STEP_PD},
          cases=lambda *, engine: loop_cases(engine=engine).map(_oracle_greedy), max_examples=30)
def speculation_stays_alive(engine, case: LoopCase):
    handle = engine.new_engine(case.spec)
    T = case.spec.gamma + 1
    # Long enough to outlive the steps without a budget (oracle drafts commit T a step), so planned steps happen.
    lag = engine.overlap_budget_lag(handle) if case.spec.enable_overlap else 0
    requests = [replace(r, max_new_tokens=max(r.max_new_tokens, (lag + 1) * T + 2)) for r in case.requests]
    engine.add_requests(handle, requests, join_via(engine, "pd"))
    left = {r.rid: r.max_new_tokens - 1 for r in requests}  # the prefill side sampled the first token
    planned_commits = []
    for step in range(MAX_STEPS):
        if not any(v.live for v in engine.request_views(handle)):
            break
        view = engine.step(handle)
        for rid, c, planned in zip(view.rids, view.commit_lens, view.planned):
            if not planned:
                expect_equal(f"step {step} request {rid}: tokens committed ({left[rid]} to go)", min(T, left[rid]),
                             min(c, left[rid]))
            elif left[rid] > 1:
                planned_commits.append(c)
            left[rid] -= min(c, left[rid])
    if case.spec.verify_mode != "static":
        expect(bool(planned_commits), "planned request-steps with tokens to go", ">= 1 (the budget planner ran)", 0)
        mean = sum(planned_commits) / len(planned_commits)
        expect(mean > 1, "mean tokens committed per planned step with tokens to go", "> 1 (drafts accepted)",
               f"{mean:.3g} over {len(planned_commits)} request-steps")


@st.composite
def context_cases(draw, *, engine) -> LoopCase:
    """The machine's configurations this engine runs, and 1..3 requests (greedy and sampled, EOS or not)."""
    spec = draw(st.sampled_from(engine_specs(engine)), label="spec")
    n = draw(st.integers(1, 3), label="n_requests")
    return LoopCase(spec, tuple(draw(request_specs(i, spec.vocab_size), label=f"request {i}") for i in range(n)))


FEATURE_RTOL = 1e-4  # engines keep features in float32; the oracle recomputes them in float64


@contract("LOOP-008", "every step, each request that goes on has a draft context that gains the target features of exactly its committed "
          "tokens: commit_len rows for positions seq_len .. seq_len+commit_len-1, each the target's own feature of the "
          "token at that position after the committed tokens before it, recomputed from scratch (not a rejected "
          "draft's, not a neighbour column's, not one read through a stale cache)", requires={STEP, STEP_DRAFT_CONTEXT},
          cases=context_cases, max_examples=30)
def draft_context_gains_the_committed_features(engine, case: LoopCase):
    handle = engine.new_engine(case.spec)
    engine.add_requests(handle, list(case.requests), join_via(engine, "local"))
    for step in range(MACHINE_STEPS):
        if not any(v.live for v in engine.request_views(handle)):
            return
        view = engine.step(handle)
        updates = {u.rid: u for u in engine.draft_context_updates(handle)}
        expect_equal(f"step {step}: requests whose draft context update the step reports", sorted(view.rids),
                     sorted(updates))
        known = {v.rid: list(v.prompt) + list(v.output) for v in engine.request_views(handle)}
        for rid, n, c in zip(view.rids, view.seq_lens, view.commit_lens):
            if rid in view.finished:  # a finished request's draft context is never read again
                continue
            u, where = updates[rid], f"step {step} request {rid}"
            expect_equal(f"{where}: first position the draft context gained (seq_len)", n, u.start)
            expect_equal(f"{where}: features gained (commit_len)", c, int(u.features.shape[0]))
            # Positions whose token the request has emitted (a round past its last emitted token has none to read).
            upto = min(n + c, len(known[rid]))
            if upto <= n:
                continue
            want = engine.target_features(handle, known[rid][:upto])[n:upto]
            got = u.features[: upto - n].to(torch.float64)
            err = float((got - want).abs().max())
            scale = 1.0 + float(want.abs().max())
            expect(err <= FEATURE_RTOL * scale, f"{where}: features of positions {n}..{upto - 1} vs the target's own",
                   f"max error <= {FEATURE_RTOL * scale:.3g}", f"max error {err:.3g} (per position: "
                   f"{[round(float(x), 6) for x in (got - want).abs().amax(dim=-1)]})")


def _oracle_greedy(case: LoopCase) -> LoopCase:
    reqs = tuple(replace(r, temperature=0.0, top_k=0, eos_id=None, max_new_tokens=max(r.max_new_tokens, 4))
                 for r in case.requests)
    return LoopCase(replace(case.spec, drafter="oracle", force_budget_frac=None, min_verify_len=1), reqs)


# ---- distribution ------------------------------------------------------------------

DIST_VOCAB, DIST_GAMMA, DIST_N = 4, 3, 1000
# Generations for the oracle-drafter configurations, where every draft passes and the cap alone decides what is
# emitted: a cap that depends on what it cuts shifts the law only a little (p ~ 1e-3 at 1,000), so 3x the rows.
DIST_N_CAPPED = 3000
DIST_TOKENS, DIST_WINDOW = 6, slice(2, 6)  # generate 6 tokens; test tokens 3..6, which come from planned (non-first) steps
DIST_PROMPT = (1, 2)
# (verify mode, forced budget fraction, drafter, (temperature, top_k, top_p)). The toy drafter exercises rejections
# and the residual; the oracle drafter (q = p, every draft passes) makes the cap bind, where an unpredictable cap
# shows most. The last three change the target's law itself: the engine must verify against the law it samples.
PLAIN = (1.0, 0, 1.0)
DIST_CONFIGS = (("static", None, "vanilla", PLAIN), ("cap-accept", 0.25, "oracle", PLAIN),
                ("cap-accept", 0.5, "vanilla", PLAIN), ("cap-accept", 1.0, "oracle", PLAIN),
                ("compact", 0.25, "vanilla", PLAIN), ("compact", 0.5, "oracle", PLAIN), ("compact", 1.0, "vanilla", PLAIN),
                ("static", None, "vanilla", (0.6, 0, 1.0)), ("cap-accept", 0.5, "vanilla", (1.5, 3, 1.0)),
                ("compact", 0.5, "vanilla", (1.0, 0, 0.7)))


def exact_window_law(engine, handle, prompt, length: int, window: slice, settings=PLAIN) -> dict:
    """Law of `tokens[window]` among the first `length` tokens sampled from the engine's target alone,
    with the request's (temperature, top_k, top_p) applied by the independent oracle."""
    law = {(): 1.0}
    for _ in range(length):
        nxt = {}
        for seq, mass in law.items():
            probs = oracle.sampling_law(engine.target_next_logits(handle, list(prompt) + list(seq)), *settings)
            for tok, p in enumerate(probs.tolist()):
                if p > 0:
                    nxt[seq + (tok,)] = mass * p
        law = nxt
    marginal = {}
    for seq, mass in law.items():
        marginal[seq[window]] = marginal.get(seq[window], 0.0) + mass
    return marginal


@contract("DIST-001", "sampled rows follow the target's sequence law: chi-square of tokens 3..6 vs the exact law for "
          "static and cap-accept/compact at forced budget fractions 0.25, 0.5, 1, and at temperatures 0.6 and 1.5, "
          "top-k 3 and top-p 0.7 (fixed seeds; one gate, family-wise false alarm <= 1e-3)",
          requires={STEP}, marks=("stat",))
def sequence_law(engine):
    # The static configurations, and the ragged ones the engine runs (contracts.step_modes; each keeps its own seed).
    configs = law_configs(engine, list(enumerate(DIST_CONFIGS)), mode_of=lambda sc: sc[1][0])
    family = stats.Gate(len(configs))  # gated per configuration: a failing one ends the run
    with single_thread():
        for seed, (mode, frac, drafter, settings) in configs:
            n = budget.rows(DIST_N_CAPPED if drafter == "oracle" else DIST_N)
            spec = EngineSpec(vocab_size=DIST_VOCAB, gamma=DIST_GAMMA, drafter=drafter, verify_mode=mode, force_budget_frac=frac,
                              seed=100 + seed, model_seed=5, pool_size=n, max_context_len=32)
            handle = engine.new_engine(spec)
            t, k, p = settings
            engine.add_requests(handle, [RequestSpec(i, DIST_PROMPT, t, DIST_TOKENS, top_k=k, top_p=p)
                                         for i in range(n)], join_via(engine, "local"))
            drain(engine, handle, MAX_STEPS)
            counts = {}
            for v in engine.request_views(handle):
                key = tuple(v.output[DIST_WINDOW])
                counts[key] = counts.get(key, 0) + 1
            law = exact_window_law(engine, handle, DIST_PROMPT, DIST_TOKENS, DIST_WINDOW, settings)
            family.check(*stats.table_test(f"{mode} frac={frac} {drafter} (T, top_k, top_p)={settings}: tokens 3..6",
                                           counts, law))

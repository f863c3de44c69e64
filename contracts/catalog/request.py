"""Whole-request contracts: every sampling parameter the engine accepts, against plain decoding under the same
parameters (the semantics and the oracle: `contracts.request_oracle`).

REQ-001 is greedy and token-exact; REQ-002 checks the law each sampled column's accept reads, exactly; REQ-003 is
the sampled output's law through the one statistical gate; REQ-004 the per-request parameter state after each step;
REQ-005 one greedy verify batch of whole requests through the engine's verify entry point (engines without a step
level: vLLM V1).
A pack exercises the parameter families it declares (`request.*`); `accepted_parameters` names what its engine
takes, and the report lists what it takes but the pack does not exercise.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import torch

from contracts import budget, request_oracle, stats
from contracts.boundary.engine import EngineSpec, LoopCase, RequestSpec
from contracts.checks import expect, expect_equal
from contracts.machine import drain, join_via, serve, single_thread
from contracts.protocol import REQUEST, REQUEST_PARAMETERS, REQUEST_STATE, REQUEST_VERIFY, STEP, STEP_LAWS
from contracts.registry import contract
from contracts.step_modes import law_configs
from contracts.strategies.request import request_loop_cases, request_verify_cases

MAX_STEPS = 200


def semantics_of(engine):
    return getattr(engine, "request_semantics", request_oracle.DEFAULT_SEMANTICS)


@contract("REQ-001", "greedy requests emit exactly what plain decoding emits under the same parameters: each token the "
          "lowest argmax of the target's logits after the frequency/presence/repetition penalties of the committed "
          "output, the min_new_tokens mask and the logit bias, and the request ends at its first EOS or stop token id "
          "(EOS ignored where asked) or max_new_tokens, whatever the verify mode, drafter, overlap, joins or companions",
          requires={STEP, REQUEST}, cases=lambda *, engine: request_loop_cases(engine=engine), max_examples=80)
def greedy_whole_requests(engine, case: LoopCase):
    sem = semantics_of(engine)
    handle = serve(engine, case)
    views = {v.rid: v for v in engine.request_views(handle)}
    for r in case.requests:
        if not r.greedy:
            continue
        want = request_oracle.plain_greedy(lambda seq: engine.target_next_logits(handle, seq), r, sem)
        expect_equal(f"request {r.rid} tokens ({_params(r)})", want, list(views[r.rid].output))


def _params(r: RequestSpec) -> str:
    used = sorted(request_oracle.parameters_used(r))
    return ", ".join(f"{k}={getattr(r, k)}" for k in used) or "no whole-request parameter"


LAW_TOL, LAW_TOL_F32 = 1e-9, 1e-5


@contract("REQ-002", "exact, every step: the target law each sampled request's accept reads at each verified column is "
          "the request's law after the candidates before the column, as if committed: its parameters (penalties, "
          "min_new_tokens, logit bias) read the committed output plus those candidates, then temperature, top-k, "
          "top-p and min_p, from the float64 oracle", requires={STEP, REQUEST, STEP_LAWS},
          cases=lambda *, engine: request_loop_cases(engine=engine, greedy=False), max_examples=30)
def sampled_column_laws(engine, case: LoopCase):
    sem, by_rid = semantics_of(engine), {r.rid: r for r in case.requests}

    def check_step(handle, step, view):
        lens = dict(zip(view.rids, view.verify_lens))
        for law in engine.step_laws(handle):
            r = by_rid[law.rid]
            for j in range(lens[law.rid]):
                seq = list(law.context) + list(law.candidates[: j + 1])
                logits = engine.target_next_logits(handle, seq)
                want = request_oracle.next_law(logits, r.prompt, seq[len(r.prompt):], r, sem)
                got = law.target_probs[j].to(torch.float64)
                err = float((got - want).abs().max())
                tol = LAW_TOL if law.target_probs.dtype == torch.float64 else LAW_TOL_F32
                expect(err <= tol, f"step {step} request {r.rid}: target law at column {j} ({_params(r)})",
                       [round(x, 9) for x in want.tolist()], f"{[round(x, 9) for x in got.tolist()]} (max error {err:.3g})")

    serve(engine, case, check_step)


REQ_VOCAB, REQ_N, REQ_PROMPT = 4, 1000, (1, 2)
# (verify mode, forced fraction, drafter, request): each changes the law with a parameter family that reads history.
REQ_CONFIGS = (
    ("static", None, "vanilla", RequestSpec(0, REQ_PROMPT, 1.0, 4, frequency_penalty=1.5, presence_penalty=0.5)),
    ("cap-accept", 0.5, "vanilla", RequestSpec(0, REQ_PROMPT, 1.0, 4, repetition_penalty=1.8, min_p=0.2)),
    ("compact", 0.5, "oracle", RequestSpec(0, REQ_PROMPT, 1.0, 4, eos_id=0, min_new_tokens=3, logit_bias=((0, 2.0),),
                                           stop_token_ids=(3,))),
    ("static", None, "vanilla", RequestSpec(0, REQ_PROMPT, 0.8, 4, top_k=3, logit_bias=((2, -3.0), (1, 1.5)),
                                            frequency_penalty=-1.0)),
    # A stop list alone, for an engine that takes no other family (DeepSpec): a second stop id ends the output early.
    ("static", None, "vanilla", RequestSpec(0, REQ_PROMPT, 1.0, 4, eos_id=0, stop_token_ids=(3,))),
)


def _configs(engine) -> list:
    """The configurations whose parameters this engine's pack exercises, in the verify modes it runs."""
    caps = engine.capabilities
    exercised = [(seed, mode, frac, drafter, req) for seed, (mode, frac, drafter, req) in enumerate(REQ_CONFIGS)
                 if {REQUEST_PARAMETERS[p] for p in request_oracle.parameters_used(req)} <= caps]
    return law_configs(engine, exercised, mode_of=lambda c: c[1], requests=True)


@contract("REQ-003", "sampled requests with penalties, min_p, min_new_tokens, stop token ids and logit bias follow the "
          "law of plain decoding under those parameters: chi-square of the whole output against the exact law (static "
          "and the ragged modes; fixed seeds; one gate, family-wise false alarm <= 1e-3)", requires={STEP, REQUEST},
          marks=("stat",))
def sampled_output_law(engine):
    sem, configs = semantics_of(engine), _configs(engine)
    expect(bool(configs), "configurations this engine runs", ">= 1 (its request.* families)", 0)
    # A third of the budget: at these laws' tails the chi-square rejects 2.3-3.3x its nominal alpha (simulated,
    # docs/statistics.md), so the nominal 1e-3 would not hold.
    family = stats.Gate(len(configs), family_alpha=stats.FAMILY_ALPHA / 3)
    with single_thread():
        for seed, mode, frac, drafter, req in configs:
            n = budget.rows(REQ_N)
            spec = EngineSpec(vocab_size=REQ_VOCAB, gamma=3, drafter=drafter, verify_mode=mode, force_budget_frac=frac,
                              seed=200 + seed, model_seed=7, pool_size=n, max_context_len=32)
            handle = engine.new_engine(spec)
            engine.add_requests(handle, [replace(req, rid=i) for i in range(n)], join_via(engine, "local"))
            drain(engine, handle, MAX_STEPS)
            counts = Counter(tuple(v.output) for v in engine.request_views(handle))
            law = request_oracle.output_law(lambda seq: engine.target_next_logits(handle, seq), req, sem)
            family.check(*stats.table_test(f"{mode} frac={frac} {drafter} ({_params(req)}): whole output",
                                           dict(counts), law))


@contract("REQ-004", "after every step, each live request's parameter state is a function of its committed output alone: "
          "the tokens its penalties count, the tokens they treat as seen, and the output length min_new_tokens "
          "counts are those of the tokens it emitted, never of drafts or rejected tokens",
          requires={STEP, REQUEST, REQUEST_STATE}, cases=lambda *, engine: request_loop_cases(engine=engine),
          max_examples=30)
def parameter_state(engine, case: LoopCase):
    sem = semantics_of(engine)

    def check_step(handle, step, view):
        views = {v.rid: v for v in engine.request_views(handle)}
        for s in engine.param_states(handle):
            v, where = views[s.rid], f"step {step} request {s.rid}"
            out = list(v.output)
            if s.output_len is not None:
                expect_equal(f"{where}: output length min_new_tokens counts", len(out), s.output_len)
            if s.token_counts is not None:
                expect_equal(f"{where}: tokens the frequency penalty counts", dict(Counter(out)), dict(s.token_counts))
            if s.seen is not None:
                seen = set(out) | (set(v.prompt) if sem.repetition_counts_prompt else set())
                expect_equal(f"{where}: tokens the presence/repetition penalties treat as seen", sorted(seen), sorted(s.seen))

    serve(engine, case, check_step)


@contract("REQ-005", "greedy verify of whole requests, one ragged batch through the engine's verify: each row emits "
          "its drafts while they equal the argmax of the target's logits after the row's penalties, min_new_tokens "
          "mask and logit bias, each column reading the committed output plus the drafts before it (never a later "
          "draft), then one token: the first mismatch's argmax, or the bonus read after every draft",
          requires={REQUEST_VERIFY}, cases=lambda *, engine: request_verify_cases(engine=engine), max_examples=200)
def greedy_verify_requests(engine, case):
    sem = semantics_of(engine)
    got = engine.verify_requests(case)
    expect_equal("rows emitted", len(case.rows), len(got))
    for i, row in enumerate(case.rows):
        r = row.request
        want = request_oracle.greedy_verify(r.prompt, row.output, row.drafts, row.logits, r, sem)
        expect_equal(f"row {i} emitted tokens ({_params(r)}; output {list(row.output)}, drafts {list(row.drafts)})",
                     want, [int(t) for t in got[i]])

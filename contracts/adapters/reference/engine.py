from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional

import torch

from contracts.boundary.engine import (
    CompactView,
    DraftContextUpdate,
    DraftDraws,
    EngineOption,
    EngineSpec,
    ParamState,
    PlanCase,
    PlanView,
    RequestView,
    SpsSpec,
    StepLaws,
    StepView,
)
from dspark import engine as dspark_engine
from dspark import planner, toy_models
from dspark.graph_buckets import capture_num_tokens


def _table(sps: Optional[SpsSpec]):
    if sps is None:
        return None
    if sps.kind == "additive":
        return planner.SpsAdditiveCostTable(sps.bias_seconds, sps.alpha_points, sps.theta_points)
    return planner.SpsCostTable(sps.probes, sps.values)


# The reference engine's options that change no output (DSparkConfig's names); a mutant of the observer is a bug.
ENGINE_OPTIONS = (
    EngineOption("decision_dump", "passive"),
    # Overlap moves which confidence a ragged budget reads, so the schedule and the draws move: the greedy tokens
    # must match, and the law, which the LOOP and DIST contracts check with it on and off.
    EngineOption("enable_overlap", "output-preserving", same_seed=False),
    EngineOption("verify_backend", "output-preserving", value="triton", off="torch", same_seed=False,
                 not_exercised="the Triton kernels need their interpreter set before import; `check --backend triton` "
                               "runs the verify contracts on them (CI's triton check)"),
)
_FLAGS = {"decision_dump", "enable_overlap"}


def _options(options) -> dict:
    """EngineSpec.options as DSparkConfig fields; a name the pack does not declare is the caller's error."""
    known = {o.name for o in ENGINE_OPTIONS if not o.not_exercised}
    out = {}
    for name, value in options:
        if name not in known:
            raise ValueError(f"options: unknown engine option {name!r} (known: {', '.join(sorted(known))})")
        out[name] = value == "1" if name in _FLAGS else value
    return out


@lru_cache(maxsize=64)
def _models(vocab_size: int, model_seed: int, drafter: str):
    """The toy target and drafter of a spec; both are immutable, so engines share them."""
    target = toy_models.ToyTarget(vocab_size, seed=model_seed)
    return target, toy_models.make_drafter(drafter, target, seed=model_seed + 1)


@dataclass
class _Handle:
    decode: object  # DSparkEngine
    prefill: object  # the PD prefill-side engine (same models, same seed)
    added: list = field(default_factory=list)
    verify_lens: dict = field(default_factory=dict)  # the last step's, by request
    context_before: dict = field(default_factory=dict)  # each stepped request's draft context length before it


class ReferencePlanner:
    def new_sps_table(self, sps):
        return _table(sps)

    def sps_lookup(self, sps, tokens):
        return _table(sps).lookup(tokens)

    def verify_token_budget(self, confidence, sps, force_budget_frac, eps):
        return planner.compute_verify_token_budget(planner.survival(confidence), _table(sps), eps=eps,
                                                   force_budget_frac=force_budget_frac)

    def schedule_verify_lens(self, confidence, budget, min_verify_len, eps):
        lens, selected = planner.schedule_verify_lens(planner.survival(confidence), budget, min_verify_len=min_verify_len,
                                                      eps=eps, return_selected=True)
        return lens.tolist(), selected

    def plan_layout(self, case: PlanCase) -> PlanView:
        conf = torch.tensor(case.confidence, dtype=torch.float64)
        tiers = None if case.capture_bs is None else capture_num_tokens(case.capture_bs, case.gamma + 1)
        step = planner.plan_step(conf, conf, verify_mode=case.verify_mode, table=_table(case.sps),
                                 force_budget_frac=case.force_budget_frac, capture_num_tokens=tiers)
        if step.verify_lens is None:
            return PlanView(step.budget, None)
        return PlanView(step.budget, step.verify_lens.tolist(), step.graph_num_tokens,
                        planner.build_qo_indptr(step.verify_lens).tolist())

    def compact_layout(self, verify_lens, width, pad_to, candidates, fill):
        layout = planner.RaggedVerifyLayout.from_lens(torch.tensor(verify_lens, dtype=torch.int64), width, pad_to)
        packed = layout.pack(candidates)
        return CompactView(layout.qo_indptr.tolist(), layout.req_id.tolist(), layout.within.tolist(),
                           layout.valid.tolist(), packed, layout.scatter(packed, fill))

    def pad_verify_lens_to_graph(self, verify_lens, graph_num_tokens, padded_bs):
        lens = torch.tensor(verify_lens, dtype=torch.int64)
        return planner.pad_verify_lens_to_bucket(lens, graph_num_tokens, padded_bs).tolist()


class ReferenceEngine:
    def new_engine(self, spec: EngineSpec):
        target, drafter = _models(spec.vocab_size, spec.model_seed, spec.drafter)
        options = _options(spec.options)

        def build():
            cfg = dspark_engine.DSparkConfig(
                gamma=spec.gamma, verify_mode=spec.verify_mode, min_verify_len=spec.min_verify_len,
                force_budget_frac=spec.force_budget_frac, sps_table=_table(spec.sps), enable_overlap=spec.enable_overlap,
                sample_from_anchor=spec.sample_from_anchor, seed=spec.seed, capture_bs=spec.capture_bs,
                pool_size=spec.pool_size, max_context_len=spec.max_context_len)
            return dspark_engine.DSparkEngine(target, drafter, dataclasses.replace(cfg, **options))

        return _Handle(build(), build())

    def add_requests(self, handle, requests, via):
        reqs = [dspark_engine.Request(r.rid, tuple(r.prompt), dspark_engine.SamplingParams(
            r.temperature, r.top_k, r.max_new_tokens, r.eos_id, r.top_p, r.frequency_penalty, r.presence_penalty,
            r.repetition_penalty, r.min_new_tokens, r.min_p, tuple(r.logit_bias), tuple(r.stop_token_ids),
            r.ignore_eos)) for r in requests]
        if via == "pd":
            handle.decode.accept_handoff(handle.prefill.prefill_for_handoff(reqs))
        elif via == "local":
            handle.decode.prefill(reqs)
        else:
            raise ValueError(f"via: expected 'local' or 'pd', got {via!r}")
        handle.added.extend(r.rid for r in reqs)

    def step(self, handle):
        eng = handle.decode
        handle.context_before = {st.rid: int(st.draft_ctx.shape[0]) for st in eng.rows}
        r = eng.step()
        handle.verify_lens = dict(zip(r.rids, r.verify_lens))
        return StepView(r.rids, r.seq_lens, r.verify_lens, r.planned, r.budget, r.correct_lens, r.cap_trim, r.commit_lens,
                        r.new_seq_lens, r.emitted, r.finished)

    def step_laws(self, handle):
        return [StepLaws(x.rid, x.context, x.candidates, x.params.temperature, x.params.top_k, x.params.top_p,
                         x.target_probs, x.draft_probs, x.draft_logits, x.draft_temperature, x.draft_noise)
                for x in handle.decode.last_laws]

    def draft_context_updates(self, handle):
        # Read when asked, as last_laws is: the rows the last step appended to each draft context (a request that
        # left keeps its context in `done`; a live one's rows stay put until its next step appends after them).
        eng = handle.decode
        states = {st.rid: st for st in eng.rows}
        return [DraftContextUpdate(rid, n, (states.get(rid) or eng.done[rid]).draft_ctx[n:].clone())
                for rid, n in handle.context_before.items()]

    def target_features(self, handle, sequence):
        # The toy target's hidden state of each position, over the whole sequence at once.
        return handle.decode.target.forward([], [int(t) for t in sequence])[1]

    def draft_draws(self, handle):
        # The candidates are the anchor and the whole block; the step verified the first verify_len - 1 drafts.
        out = []
        for x in handle.decode.last_laws:
            n = handle.verify_lens[x.rid] - 1
            out.append(DraftDraws(x.rid, tuple(x.candidates[1:]), tuple(x.candidates[1:1 + n]), x.draft_probs[:n]))
        return out

    def param_states(self, handle):
        # The engine keeps one ledger per request whatever its parameters: every field is held to the output.
        return [ParamState(st.rid, st.ledger.output_len,
                           {t: int(n) for t, n in enumerate(st.ledger.counts.tolist()) if n}, frozenset(st.ledger.seen))
                for st in handle.decode.rows]

    def abort(self, handle, rid):
        handle.decode.abort(rid)

    def set_overlap(self, handle, on):
        handle.decode.set_overlap(on)

    def overlap_budget_lag(self, handle):
        return handle.decode.future_map.confidence_ring.lag

    def request_views(self, handle):
        eng = handle.decode
        di = None if eng.batch is None else eng.batch.spec_info
        views = {}
        for i, st in enumerate(eng.rows):
            if eng.enable_overlap:  # what the next step will resolve: the relay rows, read without consuming
                seq_len = int(eng.future_map.new_seq_lens_buf[st.pool_row])
                bonus = int(eng.future_map.output_tokens_buf[st.pool_row])
            else:
                seq_len, bonus = int(di.new_seq_lens[i]), int(di.bonus_tokens[i])
            views[st.rid] = RequestView(st.rid, tuple(st.prompt), list(st.output), True, None, seq_len, bonus,
                                        list(st.cache_tokens), int(st.draft_ctx.shape[0]))
        for rid, st in eng.done.items():
            views[rid] = RequestView(rid, tuple(st.prompt), list(st.output), False, st.finish_reason)
        return [views[rid] for rid in handle.added if rid in views]

    def target_next_logits(self, handle, sequence):
        return handle.decode.target.next_logits(list(sequence))

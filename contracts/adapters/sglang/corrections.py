"""The minimal in-process corrections of SGLang 0.5.23's own functions, one per finding (the pack's ledger names
each). Each takes a pytest MonkeyPatch and patches SGLang in memory only, never on disk. The findings tests show
each makes its contract pass; `check` re-runs a contract whose failure is known with all of them applied, so a
known finding cannot hide another failure of the same contract."""

import torch


def row_widened_for_dflash(mp):
    """Widen the row for the decode reserve for the DFlash family as for UNO (page >= 1)."""
    from sglang.srt.mem_cache import allocation_sizing as az
    from sglang.srt.runtime_context import get_spec
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    real = az.get_req_to_token_extra_context_len

    def widened():
        extra = real()
        algo = SpeculativeAlgorithm.from_string(get_spec().speculative_algorithm)
        if algo.is_dflash_family():
            extra = max(extra, az.get_alloc_reserve_per_decode() + az.get_alloc_page_size() - 1)
        return extra

    mp.setattr(az, "get_req_to_token_extra_context_len", widened)


def forced_fraction_skips_verify_all_cache(mp):
    """Let a forced budget fraction reach the scheduler in compact mode with a flat table."""
    from sglang.srt.speculative.dspark_components.dspark_planner import DSparkVerifyPlanner

    real = DSparkVerifyPlanner.schedule_layout

    def schedule_layout(self, **kw):
        forced = self._budget_planner is not None and self._budget_planner.forced_budget_frac is not None
        if not (forced and self._is_verify_all):
            return real(self, **kw)
        self._is_verify_all = False
        try:
            return real(self, **kw)
        finally:
            self._is_verify_all = True

    mp.setattr(DSparkVerifyPlanner, "schedule_layout", schedule_layout)


def _writer_generations(mp, ou):
    """`ConfidenceRelay.scatter` also records, per row, the generation of the request whose confidence the row now
    holds (upstream: a `writer_generation` field; here a side table, the msgspec Struct takes no new attributes).
    Returns the table of a relay."""
    tables = {}
    real_scatter = ou.ConfidenceRelay.scatter

    def scatter(self, indices, confidence):
        first = not self.initialized  # a new relay (its first scatter): a fresh table, never a dead one's by id
        real_scatter(self, indices, confidence)
        if first or id(self) not in tables:
            tables[id(self)] = torch.zeros(self.req_pool_size, dtype=torch.int64)  # generation 0: no request's
        rows = indices.to("cpu", torch.int64)
        tables[id(self)][rows] = self.pool.req_generation[rows]

    mp.setattr(ou.ConfidenceRelay, "scatter", scatter)
    return lambda relay: tables[id(relay)]


def writer_generation_recorded(mp):
    """RELAY-002: the CUDA ring copies, with each slot's confidence, the generation of the request that wrote each row,
    not the pool's generation at publish (overlap_utils.py:245)."""
    from sglang.srt.managers import overlap_utils as ou

    writers = _writer_generations(mp, ou)
    real_copy = ou.ConfidenceRelay.issue_ring_copy

    def issue_ring_copy(self, *, stream, publish_ready):
        slot, pos = self.ring_pos % ou.CONFIDENCE_RELAY_RING_DEPTH, self.ring_pos
        real_copy(self, stream=stream, publish_ready=publish_ready)
        if self.ring_pos != pos:  # a copy was issued into `slot`
            self.gen_ring[slot].copy_(writers(self))

    mp.setattr(ou.ConfidenceRelay, "issue_ring_copy", issue_ring_copy)


def host_relay_ring(mp):
    """RELAY-001: the host path (no D2H stream) gets the CUDA path's ring: copy the confidence and its writers'
    generations at each publish, read LAG publishes back. The CUDA branch is left as it is (RELAY-002 corrects it);
    applied with writer_generation_recorded in either order, both branches carry the writer's generation."""
    from sglang.srt.managers import overlap_utils as ou

    writers = _writer_generations(mp, ou)
    real_init, real_copy, real_resolve = (ou.ConfidenceRelay._lazy_init, ou.ConfidenceRelay.issue_ring_copy,
                                          ou.ConfidenceRelay.resolve)

    def lazy_init(self, confidence):
        real_init(self, confidence)
        if self.conf_ring is None:
            depth, gamma = ou.CONFIDENCE_RELAY_RING_DEPTH, confidence.shape[-1]
            self.conf_ring = torch.zeros((depth, self.req_pool_size, gamma), dtype=torch.float32)
            self.gen_ring = torch.zeros((depth, self.req_pool_size), dtype=torch.int64)

    def issue_ring_copy(self, *, stream, publish_ready):
        if stream is not None and publish_ready is not None:
            return real_copy(self, stream=stream, publish_ready=publish_ready)
        if not self.initialized:
            return
        slot = self.ring_pos % ou.CONFIDENCE_RELAY_RING_DEPTH
        self.conf_ring[slot].copy_(self.confidence_buf)
        self.gen_ring[slot].copy_(writers(self))
        self.ring_pos += 1

    def resolve(self, batch, *, stream, publish_ready):
        if stream is not None and publish_ready is not None:
            return real_resolve(self, batch, stream=stream, publish_ready=publish_ready)
        fi = None if batch.spec_info is None else batch.spec_info.future_indices
        if not self.initialized or fi is None or fi.shape[0] == 0 or self.ring_pos < ou.CONFIDENCE_RELAY_RING_LAG:
            return None
        slot = (self.ring_pos - ou.CONFIDENCE_RELAY_RING_LAG) % ou.CONFIDENCE_RELAY_RING_DEPTH
        idx = batch.req_pool_indices_cpu
        return ou.ResolvedConfidence(confidence=self.conf_ring[slot][idx], generation=self.gen_ring[slot][idx])

    mp.setattr(ou.ConfidenceRelay, "_lazy_init", lazy_init)
    mp.setattr(ou.ConfidenceRelay, "issue_ring_copy", issue_ring_copy)
    mp.setattr(ou.ConfidenceRelay, "resolve", resolve)


# ---- whole-request parameters under DSpark (REQ-001..004) -------------------------------------------------------------


def _committed(req) -> list:
    """A request's committed output, as SGLang reports it (output_ids cut at finished_len)."""
    out = list(req.output_ids)
    return out[: req.finished_len] if req.finished() and req.finished_len is not None else out


def _sync_penalizers(batch) -> None:
    """Assign every prepared penalizer's row from the request's committed output (idempotent: replaying it changes
    nothing, so the first token and a PD handoff's first token are counted once)."""
    info = getattr(batch, "sampling_info", None)
    orch = None if info is None else info.penalizer_orchestrator
    if orch is None or not orch.is_required:
        return
    for pen in orch.penalizers.values():
        if not pen.is_prepared():
            continue
        name = type(pen).__name__
        for i, req in enumerate(batch.reqs):
            out = torch.tensor(_committed(req), dtype=torch.int64, device=orch.device)
            if name == "BatchedFrequencyPenalizer":
                counts = torch.bincount(out, minlength=orch.vocab_size)[: orch.vocab_size].to(torch.float32)
                pen.cumulated_frequency_penalties[i] = pen.frequency_penalties[i] * counts
            elif name == "BatchedPresencePenalizer":
                pen.cumulated_presence_penalties[i] = 0.0
                pen.cumulated_presence_penalties[i, out] = pen.presence_penalties[i]
            elif name == "BatchedRepetitionPenalizer":
                pen.cumulated_repetition_penalties[i] = 1.0
                pen.cumulated_repetition_penalties[i, out] = pen.repetition_penalties[i]
            elif name == "BatchedMinNewTokensPenalizer":
                pen.len_output_tokens[i] = len(out)


def penalizers_follow_committed_output(mp):
    """Under the DFlash family, feed the committed output to the penalizers: `ScheduleBatch.prepare_for_decode` takes
    the speculative branch before `cumulate_penalty_output_tokens`, and nothing else cumulates. Synced from each
    request's committed output at decode preparation (before the verify reads it) and after each result."""
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.scheduler import Scheduler

    real_prepare, real_process = ScheduleBatch.prepare_for_decode, Scheduler.process_batch_result

    def prepare_for_decode(self):
        if self.spec_algorithm.is_dflash_family():
            _sync_penalizers(self)
        return real_prepare(self)

    def process_batch_result(self, batch, result):
        out = real_process(self, batch, result)
        for b in (batch, self.running_batch):
            algo = None if b is None else b.spec_algorithm
            if algo is not None and algo.is_dflash_family():
                _sync_penalizers(b)
        return out

    mp.setattr(ScheduleBatch, "prepare_for_decode", prepare_for_decode)
    mp.setattr(Scheduler, "process_batch_result", process_batch_result)


def _stop_set(req) -> set:
    """The tokens SGLang's min_new_tokens penalizer masks (BatchedMinNewTokensPenalizer._prepare)."""
    tok = req.tokenizer
    return ({t for t in (req.sampling_params.stop_token_ids or set()) | (req.eos_token_ids or set())}
            | (set((tok.additional_stop_token_ids or ())) if tok is not None else set())
            | ({tok.eos_token_id} if tok is not None and tok.eos_token_id is not None else set())) - {None}


def _penalize_per_column(logits, reqs, verify_ids) -> None:
    """In place, [bs * T, V]: column j of row i reads the penalties of the committed output plus the candidates
    1..j (the anchor, candidate 0, is the last committed token): additive (frequency, presence, the min_new_tokens
    mask), then scaling (repetition), as SGLang's sampler applies them in plain decoding."""
    from sglang.srt.sampling.penaltylib.repetition_penalty import apply_scaling_penalties

    bs, T = verify_ids.shape
    x = logits.view(bs, T, -1)
    V = x.shape[-1]
    for i, req in enumerate(reqs):
        sp = req.sampling_params
        fp, pp, rp, min_new = sp.frequency_penalty, sp.presence_penalty, sp.repetition_penalty, sp.min_new_tokens
        if fp == 0.0 and pp == 0.0 and rp == 1.0 and min_new <= 0:
            continue
        out = torch.tensor(_committed(req), dtype=torch.int64, device=x.device)
        drafts = torch.nn.functional.one_hot(verify_ids[i, 1:].to(torch.int64).clamp(0, V - 1), V)
        counts = torch.bincount(out, minlength=V)[:V][None, :] + torch.cat(
            [torch.zeros_like(drafts[:1]), drafts.cumsum(0)])  # [T, V]: column j after candidates 1..j
        add = -(fp * counts + pp * (counts > 0))
        stops = sorted(_stop_set(req))
        if min_new > 0 and stops:
            short = (len(out) + torch.arange(T, device=x.device)) < min_new
            add[:, stops] = torch.where(short[:, None], float("-inf"), add[:, stops])
        x[i].add_(add.to(x.dtype))
        if rp != 1.0:
            scale = torch.where(counts > 0, torch.tensor(rp, dtype=x.dtype), torch.tensor(1.0, dtype=x.dtype))
            col = x[i].clone()
            apply_scaling_penalties(col, scale)
            x[i].copy_(col)


def verify_applies_penalties_per_column(mp):
    """DSpark's static verify applies the request's penalties to every verify column, each column with the state it
    would have read in plain decoding (committed output plus the candidates before it); then SGLang's own
    adjustments (custom logit processors, logit bias)."""
    from sglang.srt.speculative import dflash_utils
    from sglang.srt.speculative.dspark_components.dspark_verify import TargetVerifyExecutor

    real = TargetVerifyExecutor.run_non_compact

    def run_non_compact(self, *, batch, draft_input, verify_ids_2d, verify_window, sampling_info):
        result = real(self, batch=batch, draft_input=draft_input, verify_ids_2d=verify_ids_2d,
                      verify_window=verify_window, sampling_info=None)
        if sampling_info is not None:
            logits = result.logits_output.next_token_logits
            _penalize_per_column(logits, batch.reqs, verify_ids_2d)
            dflash_utils.apply_dflash_verify_logits_adjustments(
                next_token_logits=logits, sampling_info=sampling_info, draft_token_num=verify_ids_2d.shape[1])
        return result

    mp.setattr(TargetVerifyExecutor, "run_non_compact", run_non_compact)


def verify_target_law_applies_min_p(mp):
    """DSpark's sampled accept cuts its target law with min_p after temperature, top-k and top-p, as SGLang's sampler
    does in plain decoding (tokens below min_p times the column's largest probability dropped, renormalised)."""
    import contextvars

    from sglang.kernels.ops.speculative.dspark import dspark_accept

    current = contextvars.ContextVar("sampling_info", default=None)
    real_core, real_softmax = dspark_accept._accept_sampling_core, dspark_accept.SoftmaxTemp
    real_build = dspark_accept.build_speculative_verify_target_probs

    def cut(probs, rows_per_request):
        info = current.get()
        if info is None or not info.need_min_p_sampling:
            return probs
        shape = probs.shape
        p = probs.reshape(-1, shape[-1])
        min_p = torch.repeat_interleave(info.min_ps.to(p.dtype), rows_per_request, dim=0)[:, None]
        p = torch.where(p >= min_p * p.max(dim=-1, keepdim=True).values, p, 0.0)
        return (p / p.sum(dim=-1, keepdim=True)).reshape(shape)

    class SoftmaxTemp:
        @staticmethod
        def execute(*, logits, temperatures, rows_per_request, **kw):
            probs = real_softmax.execute(logits=logits, temperatures=temperatures, rows_per_request=rows_per_request,
                                         **kw)
            return cut(probs, rows_per_request)

    def build(**kw):
        return cut(real_build(**kw), kw["draft_token_num"])

    def core(**kw):
        token = current.set(kw["sampling_info"])
        try:
            return real_core(**kw)
        finally:
            current.reset(token)

    mp.setattr(dspark_accept, "_accept_sampling_core", core)
    mp.setattr(dspark_accept, "SoftmaxTemp", SoftmaxTemp)
    mp.setattr(dspark_accept, "build_speculative_verify_target_probs", build)

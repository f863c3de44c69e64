"""The reference DSpark engine: prefill, decode steps, generate (SGLang `DSparkWorkerV2`).

One decode step: resolve the inputs (from the FutureMap relay when overlap is
on), reserve the verify window, draft a block, plan verify lengths (ragged
modes), run the target verify over `[anchor, d_1..d_gamma]` (or only the
packed `sum(L)` rows in compact mode), accept with `dspark.verify`, commit
`commit_len = correct_len + 1` tokens to the target cache and the draft
context, emit, and publish/stash the next inputs.

Invariants it keeps: the target cache holds the committed sequence without the
pending anchor (`len == seq_len`), the draft context has one row per committed
position, and every step emits between 1 and `L` tokens per live request.
Sampling randomness is keyed by (seed, request id, request-local step), so a
request's draws never depend on its batch row or its companions. The records
it takes and returns live in `dspark.engine_types`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import torch

from dspark import _validate, disaggregation, observe, penalties, planner, sampling, verify
from dspark.draft_input import DraftInput
from dspark.dspark_draft import DraftBlockProposer
from dspark.engine_types import PrefillHandoff, Request, RequestState, SamplingParams, StepLaws, StepRecord
from dspark.graph_buckets import capture_num_tokens
from dspark.mem_cache import DraftContextPool
from dspark.overlap_utils import BudgetConfidence, FutureMap, RelayPayload
from dspark.schedule_batch import Req, ReqToTokenPool, ScheduleBatch

__all__ = ["DSparkConfig", "DSparkEngine", "PrefillHandoff", "Request", "RequestState", "SamplingParams", "StepRecord",
           "VERIFY_MODES", "request_key"]

F64 = torch.float64
VERIFY_MODES = ("static", "cap-accept", "compact")
_MASK64 = (1 << 63) - 1


@dataclass
class DSparkConfig:
    gamma: int = 4
    verify_mode: str = "static"
    min_verify_len: int = 1
    max_verify_len: Optional[int] = None  # default gamma + 1
    mask_token_id: Optional[int] = None  # default vocab - 1
    sample_from_anchor: bool = True
    survival_eps: float = planner.SURVIVAL_EPS
    force_budget_frac: Optional[float] = None
    sps_table: object = None  # SpsCostTable / SpsAdditiveCostTable; None = flat (verify-all budget)
    enable_overlap: bool = False
    pool_size: int = 16
    max_context_len: int = 256
    capture_bs: Optional[tuple] = None  # compact mode pads the packed rows to a captured token bucket
    seed: int = 0
    verify_backend: str = "torch"
    decision_dump: bool = False  # passive: keep each step's plan in `decisions` (dspark.observe)


def _check_config(cfg: DSparkConfig, vocab: int) -> DSparkConfig:
    if not isinstance(cfg, DSparkConfig):
        raise TypeError(f"config: expected a DSparkConfig, got {type(cfg).__name__}")
    cfg = dataclasses.replace(cfg)  # the engine's own copy: defaults filled here must not leak into the caller's config
    _validate.positive_int("gamma", cfg.gamma)
    if cfg.verify_mode not in VERIFY_MODES:
        raise ValueError(f"verify_mode: expected one of {VERIFY_MODES}, got {cfg.verify_mode!r}")
    T = cfg.gamma + 1
    max_len = T if cfg.max_verify_len is None else cfg.max_verify_len
    if isinstance(max_len, bool) or not isinstance(max_len, int) or not 1 <= max_len <= T:
        raise ValueError(f"max_verify_len: must lie in [1, gamma+1={T}], got {cfg.max_verify_len!r}")
    if isinstance(cfg.min_verify_len, bool) or not isinstance(cfg.min_verify_len, int) or cfg.min_verify_len < 0:
        raise ValueError(f"min_verify_len: expected a non-negative int, got {cfg.min_verify_len!r}")
    if cfg.min_verify_len > max_len:
        raise ValueError(f"min_verify_len: {cfg.min_verify_len} exceeds max_verify_len {max_len}")
    mask = vocab - 1 if cfg.mask_token_id is None else cfg.mask_token_id
    if isinstance(mask, bool) or not isinstance(mask, int) or not 0 <= mask < vocab:
        raise ValueError(f"mask_token_id: must lie in [0, vocab={vocab}), got {cfg.mask_token_id!r}")
    planner.check_budget_frac(cfg.force_budget_frac)
    if cfg.sps_table is not None and not isinstance(cfg.sps_table, (planner.SpsCostTable, planner.SpsAdditiveCostTable)):
        raise ValueError(f"sps_table: expected an SpsCostTable or SpsAdditiveCostTable, got {type(cfg.sps_table).__name__}")
    if not _validate.finite("survival_eps", cfg.survival_eps) >= 0:
        raise ValueError(f"survival_eps: must be >= 0, got {cfg.survival_eps}")
    _validate.positive_int("pool_size", cfg.pool_size)
    _validate.positive_int("max_context_len", cfg.max_context_len)
    _validate.integer("seed", cfg.seed)
    _validate.flag("enable_overlap", cfg.enable_overlap)
    _validate.flag("sample_from_anchor", cfg.sample_from_anchor)
    _validate.flag("decision_dump", cfg.decision_dump)
    if cfg.capture_bs is not None:
        for bs in _validate.listed("capture_bs", cfg.capture_bs):
            _validate.positive_int("capture_bs[]", bs)
    if cfg.verify_backend not in ("auto", "torch", "triton"):
        raise ValueError(f"verify_backend: expected 'auto', 'torch' or 'triton', got {cfg.verify_backend!r}")
    if cfg.verify_backend == "triton" and not verify.triton_runs_on_cpu():  # the engine's tensors live on the CPU
        raise ValueError("verify_backend: 'triton' on the CPU needs the Triton interpreter (TRITON_INTERPRET=1 set "
                         "before dspark.verify.triton_kernels is first imported)")
    cfg.max_verify_len, cfg.mask_token_id = max_len, mask
    return cfg


def _check_progress(progress) -> None:
    if progress is not None and not callable(progress):
        raise TypeError(f"progress: expected a callable taking each StepRecord, got {type(progress).__name__}")


def admission_limit(max_context_len: int, num_draft_tokens: int, page_size: int = 1) -> int:
    """The longest prompt + max_new_tokens admitted: a request's row keeps room for the double verify window,
    rounded up to a whole page."""
    return max_context_len - 2 * num_draft_tokens - (page_size - 1)


def request_key(seed: int, rid: int, local_step: int) -> int:
    """The generator seed of one request's draws at one of its steps (0 = prefill)."""
    return (seed * 0x9E3779B97F4A7C15 + rid * 0xC2B2AE3D27D4EB4F + local_step * 0x165667B19E3779F9 + 1) & _MASK64


class DSparkEngine:
    def __init__(self, target, drafter, config: Optional[DSparkConfig] = None):
        self.target, self.drafter = target, drafter
        self.vocab_size = target.vocab_size
        if getattr(drafter, "vocab_size", self.vocab_size) != self.vocab_size:
            raise ValueError(f"drafter: vocabulary {drafter.vocab_size} != target vocabulary {self.vocab_size}")
        self.config = _check_config(config or DSparkConfig(), self.vocab_size)
        cfg = self.config
        self.gamma, self.T = cfg.gamma, cfg.gamma + 1
        self.proposer = DraftBlockProposer(cfg.gamma, mask_token_id=cfg.mask_token_id, sample_from_anchor=cfg.sample_from_anchor)
        self.pool = ReqToTokenPool(cfg.pool_size, cfg.max_context_len)
        self.draft_pool = DraftContextPool(cfg.pool_size, cfg.max_context_len, target.hidden_size)
        self.free_rows = list(range(cfg.pool_size))
        self.future_map = FutureMap(cfg.pool_size)  # no re-poisoning: a stale read returns the last value, as in SGLang
        self.enable_overlap = bool(cfg.enable_overlap)
        self.batch: Optional[ScheduleBatch] = None
        self.rows: List[RequestState] = []  # live requests in batch order
        self.done: Dict[int, RequestState] = {}
        self.records: List[StepRecord] = []
        self.decisions: List[dict] = []  # config.decision_dump
        self._last_sampled = None  # what the last step's sampled rows read (StepLaws are built from it when asked)
        self.budget_confidence = BudgetConfidence(cfg.pool_size)

    # ---- requests ------------------------------------------------------------

    def _check_request(self, i: int, r: Request) -> None:
        if not isinstance(r, Request):
            raise TypeError(f"requests[{i}]: expected a Request, got {type(r).__name__}")
        _validate.integer(f"requests[{i}].rid", r.rid)
        where = f"requests[{r.rid}]"
        if not isinstance(r.prompt, (tuple, list)):
            raise TypeError(f"{where}.prompt: expected a tuple of token ids, got {type(r.prompt).__name__}")
        if not r.prompt:
            raise ValueError(f"{where}.prompt: empty; the target needs at least one token")
        if any(isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < self.vocab_size for t in r.prompt):
            raise ValueError(f"{where}.prompt: token ids must lie in [0, {self.vocab_size})")
        p = r.params
        if not isinstance(p, SamplingParams):
            raise TypeError(f"{where}.params: expected SamplingParams, got {type(p).__name__}")
        _validate.positive_int(f"{where}.params.max_new_tokens", p.max_new_tokens)
        if not _validate.finite(f"{where}.params.temperature", p.temperature) >= 0:
            raise ValueError(f"{where}.params.temperature: must be >= 0, got {p.temperature}")
        _validate.nonnegative_int(f"{where}.params.top_k", p.top_k)
        if not 0 < _validate.finite(f"{where}.params.top_p", p.top_p) <= 1:
            raise ValueError(f"{where}.params.top_p: must lie in (0, 1], got {p.top_p}")
        if p.eos_id is not None and not 0 <= _validate.integer(f"{where}.params.eos_id", p.eos_id) < self.vocab_size:
            raise ValueError(f"{where}.params.eos_id: must lie in [0, {self.vocab_size})")
        self._check_history_params(where, p)
        if len(r.prompt) + p.max_new_tokens > admission_limit(self.config.max_context_len, self.T):
            raise ValueError(f"{where}.prompt: {len(r.prompt)} prompt + {p.max_new_tokens} new tokens + 2*{self.T} "
                             f"verify slots exceed the pool slot (max_context_len={self.config.max_context_len})")
        if r.rid in self.done or any(s.rid == r.rid for s in self.rows):
            raise ValueError(f"{where}.rid: request id {r.rid} is already in use")

    def _check_history_params(self, where: str, p: SamplingParams) -> None:
        """SGLang's SamplingParams.verify ranges for the parameters that read the request's history."""
        for name in ("frequency_penalty", "presence_penalty"):
            if not -2 <= _validate.finite(f"{where}.params.{name}", getattr(p, name)) <= 2:
                raise ValueError(f"{where}.params.{name}: must lie in [-2, 2], got {getattr(p, name)}")
        if not 0 < _validate.finite(f"{where}.params.repetition_penalty", p.repetition_penalty) <= 2:
            raise ValueError(f"{where}.params.repetition_penalty: must lie in (0, 2], got {p.repetition_penalty}")
        if not 0 <= _validate.finite(f"{where}.params.min_p", p.min_p) <= 1:
            raise ValueError(f"{where}.params.min_p: must lie in [0, 1], got {p.min_p}")
        if not 0 <= _validate.nonnegative_int(f"{where}.params.min_new_tokens", p.min_new_tokens) <= p.max_new_tokens:
            raise ValueError(f"{where}.params.min_new_tokens: must lie in [0, max_new_tokens={p.max_new_tokens}]")
        _validate.flag(f"{where}.params.ignore_eos", p.ignore_eos)
        for tok in _validate.listed(f"{where}.params.stop_token_ids", p.stop_token_ids):
            if not 0 <= _validate.integer(f"{where}.params.stop_token_ids[]", tok) < self.vocab_size:
                raise ValueError(f"{where}.params.stop_token_ids: token ids must lie in [0, {self.vocab_size})")
        biased = []
        for pair in _validate.listed(f"{where}.params.logit_bias", p.logit_bias):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ValueError(f"{where}.params.logit_bias: expected (token id, bias) pairs, got {pair!r}")
            if not 0 <= _validate.integer(f"{where}.params.logit_bias[].token", pair[0]) < self.vocab_size:
                raise ValueError(f"{where}.params.logit_bias: token ids must lie in [0, {self.vocab_size})")
            _validate.finite(f"{where}.params.logit_bias[].bias", pair[1])
            biased.append(pair[0])
        if len(set(biased)) != len(biased):
            raise ValueError(f"{where}.params.logit_bias: a token id appears twice")

    def _check_requests(self, requests: Sequence[Request]) -> None:
        for i, r in enumerate(requests):
            self._check_request(i, r)
        rids = [r.rid for r in requests]
        if len(set(rids)) != len(rids):
            raise ValueError(f"requests.rid: request ids must be distinct, got {rids}")

    def _uniforms(self, rids: Sequence[int], local_steps: Sequence[int], n: int) -> torch.Tensor:
        """[len(rids), n] float64 uniforms in (0, 1); row r from the (seed, rids[r], local_steps[r]) stream."""
        seed = self.config.seed
        return sampling.counter_uniforms([request_key(seed, r, s) for r, s in zip(rids, local_steps)], n)

    @staticmethod
    def _exponential(u: torch.Tensor) -> torch.Tensor:
        return -torch.log1p(-u)  # Exp(1), > 0 since u > 0

    def prefill_for_handoff(self, requests: Sequence[Request]) -> List[PrefillHandoff]:
        """The prefill side: run the target over each prompt and sample the first token.

        Prompts of one length share a batched forward; a sampled first token is
        the exponential race `argmax p * (1/E)` on the request's step-0 stream.
        """
        requests = _validate.listed("requests", requests)
        self._check_requests(requests)
        first, hiddens = {}, {}
        by_len: Dict[int, list] = {}
        for r in requests:
            by_len.setdefault(len(r.prompt), []).append(r)
        for group in by_len.values():
            tokens = torch.tensor([list(r.prompt) for r in group], dtype=torch.int64)
            logits, hidden = self.target.forward_pairs(torch.full((len(group),), -1, dtype=torch.int64), tokens)
            last = penalties.process_first(logits[:, -1], [r.params for r in group])
            temps = torch.tensor([0.0 if r.params.is_greedy else float(r.params.temperature) for r in group], dtype=F64)
            probs = self._target_probs(last.clone(), temps, [r.params for r in group])
            race = 1.0 / self._exponential(self._uniforms([r.rid for r in group], [0] * len(group), self.vocab_size))
            drawn = torch.argmax(probs * race, dim=-1)
            pick = torch.where(temps > 0, drawn, torch.argmax(last, dim=-1))
            for i, r in enumerate(group):
                first[r.rid], hiddens[r.rid] = int(pick[i]), hidden[i]
        return [PrefillHandoff(r.rid, tuple(r.prompt), r.params, len(r.prompt), first[r.rid], tuple(r.prompt), hiddens[r.rid])
                for r in requests]

    def _check_handoffs(self, handoffs: Sequence[PrefillHandoff]) -> None:
        """Every handoff is checked before any state changes, so a bad one admits nothing."""
        for i, h in enumerate(handoffs):
            if isinstance(h.first_token, bool) or not isinstance(h.first_token, int) or not 0 <= h.first_token < self.vocab_size:
                raise ValueError(f"handoffs[{i}].first_token: expected a token id in [0, {self.vocab_size}), got {h.first_token!r}")
            if isinstance(h.committed_len, bool) or not isinstance(h.committed_len, int) or h.committed_len < 0:
                raise ValueError(f"handoffs[{i}].committed_len: expected a non-negative int, got {h.committed_len!r}")
            if h.committed_len != len(h.prompt):  # the KV covers the prompt; the first token is the pending anchor
                raise ValueError(f"handoffs[{i}].committed_len: {h.committed_len}, but the prompt holds {len(h.prompt)} tokens")
            if tuple(h.kv_tokens) != tuple(h.prompt):  # what the prefill server's KV holds: the prompt
                raise ValueError(f"handoffs[{i}].kv_tokens: the KV must hold the prompt {tuple(h.prompt)}, got "
                                 f"{tuple(h.kv_tokens)}")
            if not isinstance(h.kv_hiddens, torch.Tensor) or h.kv_hiddens.dim() < 1 or h.kv_hiddens.shape[0] != h.committed_len:
                raise ValueError(f"handoffs[{i}].kv_hiddens: expected a tensor with {h.committed_len} rows")
            self.draft_pool.check_load(f"handoffs[{i}].kv_hiddens", h.kv_hiddens)

    def _admit(self, handoffs: Sequence[PrefillHandoff], *, prebuilt: bool) -> None:
        handoffs = _validate.listed("handoffs", handoffs)
        for i, h in enumerate(handoffs):
            if not isinstance(h, PrefillHandoff):
                raise TypeError(f"handoffs[{i}]: expected a PrefillHandoff, got {type(h).__name__}")
        self._check_requests([Request(h.rid, h.prompt, h.params) for h in handoffs])
        self._check_handoffs(handoffs)
        if len(handoffs) > len(self.free_rows):
            raise RuntimeError(f"pool_size: {len(handoffs)} requests but {len(self.free_rows)} free slots")
        states, hiddens, finished, rows = [], [], [], iter(self.free_rows)
        for h in handoffs:
            req = Req(rid=h.rid, origin_input_ids=list(h.prompt), output_ids=[h.first_token], req_pool_idx=-1,
                      kv_committed_len=h.committed_len)
            st = RequestState(h.rid, list(h.prompt), h.params, req, list(h.kv_tokens), None, [h.first_token],
                              ledger=penalties.PenaltyLedger.of(self.vocab_size, [h.first_token]))
            if self._truncate(st, []):  # max_new_tokens == 1 or an EOS first token: done at prefill
                st.kept_draft_ctx = h.kv_hiddens.clone()
                finished.append(st)
            else:
                req.req_pool_idx = next(rows)  # taken below, once the batch is built
                states.append(st)
                hiddens.append(h.kv_hiddens)
        if states:
            self._admit_batch(states, hiddens, prebuilt)
        self.done.update((st.rid, st) for st in finished)

    def _admit_batch(self, states: List[RequestState], hiddens: List[torch.Tensor], prebuilt: bool) -> None:
        """Build the new requests' batch (which may still refuse them) before any engine state changes, then take
        their rows, load their draft contexts and merge."""
        batch = ScheduleBatch.prebuilt([s.req for s in states], self.pool, speculative_num_draft_tokens=self.T,
                                       enable_overlap=self.enable_overlap)
        if prebuilt:  # PD decode side: the handoff builds the draft input and seeds the relay
            disaggregation.process_prebuilt(batch, self.future_map)
        else:
            di = DraftInput(bonus_tokens=torch.tensor([s.output[-1] for s in states], dtype=torch.int64),
                            new_seq_lens=batch.seq_lens.clone(),
                            future_indices=batch.req_pool_indices if self.enable_overlap else None)
            batch.spec_info = di
            if self.enable_overlap:
                self.future_map.publish(batch.req_pool_indices, batch.seq_lens)
                self.future_map.stash(batch.req_pool_indices, RelayPayload.from_draft_input(di))
        for st, h in zip(states, hiddens):
            self.free_rows.remove(st.pool_row)
            self.draft_pool.load(self.pool.take_row(st.pool_row), h)
            st.draft_pool = self.draft_pool
        self._merge(batch, states)

    def _merge(self, batch: ScheduleBatch, states: List[RequestState]) -> None:
        if self.batch is None:
            self.batch, self.rows = batch, list(states)
            return
        run = self.batch
        run.spec_info.merge_batch(batch.spec_info)
        run.reqs = run.reqs + batch.reqs
        run.req_pool_indices = torch.cat([run.req_pool_indices, batch.req_pool_indices])
        run.seq_lens = torch.cat([run.seq_lens, batch.seq_lens])
        self.rows = self.rows + states

    def prefill(self, requests: Sequence[Request]) -> None:
        """Local prefill: the requests join the running batch with their first token as the anchor."""
        self._admit(self.prefill_for_handoff(requests), prebuilt=False)

    def accept_handoff(self, handoffs: Sequence[PrefillHandoff]) -> None:
        """PD decode side: admit requests prefilled elsewhere through `process_prebuilt`."""
        self._admit(handoffs, prebuilt=True)

    def abort(self, rid: int) -> None:
        _validate.integer("rid", rid)
        for i, st in enumerate(self.rows):
            if st.rid == rid:
                st.finish_reason = "abort"
                self._leave([i])
                return
        raise ValueError(f"rid: no live request {rid}")

    def set_overlap(self, on: bool) -> None:
        """Switch overlap scheduling; live rows move into (seed) or out of (resolve) the relay. The confidence path
        switched to starts empty: history left from an earlier period would be read as if `lag` steps old."""
        on = _validate.flag("on", on)
        if on == self.enable_overlap:
            return
        (self.future_map.confidence_ring if on else self.budget_confidence.carry).clear()
        b = self.batch
        if b is not None:
            di = b.spec_info
            if on:
                di.future_indices = b.req_pool_indices
                self.future_map.publish(b.req_pool_indices, di.new_seq_lens)
                self.future_map.stash(b.req_pool_indices, RelayPayload.from_draft_input(di))
            else:
                self.future_map.resolve_seq_lens(b)
                self.future_map.resolve_forward_inputs(b)
                # The relay held the live values; its side tensors went stale with the batch, so start a fresh input.
                b.spec_info = DraftInput(bonus_tokens=di.bonus_tokens, new_seq_lens=b.seq_lens.clone())
            b.enable_overlap = on
        self.enable_overlap = on

    def update_internal_state(self, *, dspark_force_budget_frac: Optional[float] = None) -> None:
        """SGLang's runtime update: force (or, with None, stop forcing) the verify budget fraction."""
        frac = planner.check_budget_frac(dspark_force_budget_frac)
        self.config = dataclasses.replace(self.config, force_budget_frac=frac)

    @property
    def live(self) -> List[RequestState]:
        return list(self.rows)

    # ---- one decode step --------------------------------------------------------

    def _resolve_inputs(self) -> torch.Tensor:
        """SGLang's order: the scheduler's prepare_for_decode (its reservation covers a committed length that lags
        a step), then run_batch resolves the relay."""
        b = self.batch
        b.prepare_for_decode()
        if self.enable_overlap:
            self.future_map.resolve_seq_lens(b)
            self.future_map.resolve_forward_inputs(b)
        else:
            b.seq_lens = b.spec_info.new_seq_lens.clone()
        for req, n in zip(b.reqs, b.seq_lens.tolist()):
            req.kv_committed_len = n
        return b.seq_lens.clone()

    def _noise(self):
        """Per request, from its (seed, rid, local step) stream: Gumbel noise [gamma, V] for the drafts,
        acceptance coins [gamma], and resample weights 1/E [V] (the exponential race). Greedy rows read none of
        it, so only sampled rows are drawn (zero noise and coins, unit weights elsewhere); a request's draws stay a
        function of its own key."""
        g, V, bs = self.gamma, self.vocab_size, len(self.rows)
        sampled = [i for i, st in enumerate(self.rows) if not st.params.is_greedy]

        def blank():  # what a greedy row reads: no noise, no coins, unit weights
            return torch.zeros(bs, g, V, dtype=F64), torch.zeros(bs, g, dtype=F64), torch.ones(bs, V, dtype=F64)

        if not sampled:
            return blank()
        drawn = self._split_noise(self._uniforms([self.rows[i].rid for i in sampled],
                                                 [self.rows[i].local_step + 1 for i in sampled], g * V + g + V))
        if len(sampled) == bs:
            return drawn
        noise = blank()
        for full, part in zip(noise, drawn):
            full[sampled] = part
        return noise

    def _split_noise(self, u: torch.Tensor):
        g, V = self.gamma, self.vocab_size
        gumbel = -torch.log(self._exponential(u[:, : g * V])).reshape(-1, g, V)
        return gumbel, u[:, g * V: g * V + g], 1.0 / self._exponential(u[:, g * V + g:])

    def plan_verify_lens(self, proposal):
        """(verify_lens [bs] int64 or None for static, budget or None, planned mask, the confidence the budget read).

        The budget reads each row's confidence from CONFIDENCE_RELAY_LAG steps ago, and only if the row's current
        request wrote it (same generation); other rows count as certain (survival 1, SGLang's optimism). With
        nothing resolved yet there is no budget and every row verifies all."""
        bs = len(self.rows)
        if self.config.verify_mode == "static":
            return None, None, [False] * bs, None
        cfg, rows = self.config, self.batch.req_pool_indices
        budget_conf = self.budget_confidence.read(rows, proposal.confidence, self.pool.req_generation[rows],
                                                  self.future_map if self.enable_overlap else None)
        if budget_conf is None:
            return torch.full((bs,), cfg.max_verify_len, dtype=torch.int64), None, [False] * bs, None
        step = planner.plan_step(budget_conf, proposal.confidence, verify_mode=cfg.verify_mode, table=cfg.sps_table,
                                 force_budget_frac=cfg.force_budget_frac, min_verify_len=cfg.min_verify_len,
                                 max_verify_len=cfg.max_verify_len, eps=cfg.survival_eps)
        return step.verify_lens, step.budget, [True] * bs, budget_conf

    def _target_probs(self, logits: torch.Tensor, temps: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
        """Each request's sampling law: temperature, then top-k, top-p and min_p applied to the target only."""
        probs = sampling.target_probs(logits, temps.tolist(), [p.top_k for p in params], [p.top_p for p in params])
        return penalties.min_p_cut(probs, [p.min_p for p in params])

    def _verify_forward(self, cand: torch.Tensor, lens: Optional[torch.Tensor]):
        """Target logits / hiddens on the strided [bs, T] layout, and the rows computed."""
        prev2 = torch.tensor([st.cache_tokens[-1] if st.cache_tokens else -1 for st in self.rows], dtype=torch.int64)
        if self.config.verify_mode != "compact" or lens is None:
            logits, hidden = self.target.forward_pairs(prev2, cand)
            return logits, hidden, cand.numel(), None
        total = int(lens.sum())
        tiers = capture_num_tokens(self.config.capture_bs, self.T) if self.config.capture_bs else None
        graph_tokens = planner.compact_graph_tier(lens, tiers)
        layout = planner.RaggedVerifyLayout.from_lens(lens, self.T, pad_to=graph_tokens)
        # Only the real packed rows are computed: the graph's pad rows would hold nothing anyone reads.
        before = torch.cat([prev2[:, None], cand[:, :-1]], dim=1)
        real = layout.window
        logits, hidden = self.target.logits_and_hidden(before.reshape(-1)[real], cand.reshape(-1)[real])
        return layout.scatter(logits, 0.0), layout.scatter(hidden, 0.0), total, graph_tokens

    def _accept(self, cand, logits, proposal, lens, temps, coins, resample):
        """The accept result, and the target and draft laws it read (None for an all-greedy batch)."""
        params = [st.params for st in self.rows]
        backend = self.config.verify_backend
        # The engine built every input itself: the ops check shapes and dtypes, not values (check=False, as SGLang's
        # decode path runs them without a device sync).
        if all(p.is_greedy for p in params):
            return verify.greedy_accept(cand, logits, lens, backend=backend, check=False), None, None
        p = self._target_probs(logits, temps, params)
        q = self._target_probs(proposal.step_logits, temps, [SamplingParams()] * len(params))
        greedy = temps == 0  # temps holds 0 exactly for the greedy rows
        return verify.mixed_accept(cand, logits, p, q, coins, resample, greedy, lens, backend=backend, check=False), p, q

    def _truncate(self, st: RequestState, emitted: list) -> bool:
        """Append what fits up to the first stop token (EOS or a stop token id) and max_new_tokens; True when the
        request is done. The ledger records what was appended, nothing else."""
        room = st.params.max_new_tokens - len(st.output)
        stops = st.params.stop_ids
        if not stops and len(emitted) < room:  # the common case: all of it fits, and more is to come
            st.output.extend(emitted)
            st.ledger.record(emitted)
            return False
        take = emitted[:max(room, 0)]
        first = next((j for j, t in enumerate(take) if t in stops), None)
        if first is not None:
            take = take[: first + 1]
        st.output.extend(take)
        st.ledger.record(take)
        emitted[:] = take
        last = st.output[-1] if st.output else None
        if last is not None and last in stops:
            st.finish_reason = "eos" if last == st.params.eos_id and not st.params.ignore_eos else "stop"
        elif len(st.output) >= st.params.max_new_tokens:
            st.finish_reason = "length"
        return st.finish_reason is not None

    def _commit(self, st: RequestState, anchor: int, drafts: list, correct: int) -> None:
        st.cache_tokens.extend([anchor] + drafts[:correct])
        st.req.kv_committed_len = len(st.cache_tokens)

    def _publish(self, new_seq_lens: torch.Tensor, bonus: torch.Tensor, confidence: torch.Tensor) -> None:
        di = self.batch.spec_info
        if self.enable_overlap:  # seq lens (with the confidence relay) first, then the bonus: step N+1 resolves both
            relay = self.config.verify_mode != "static"  # SGLang relays confidence for the ragged modes only
            self.future_map.publish(di.future_indices, new_seq_lens, confidence if relay else None,
                                    self.pool.req_generation[di.future_indices] if relay else None)
            self.future_map.stash(di.future_indices, RelayPayload(bonus_tokens=bonus))
        else:
            di.bonus_tokens, di.new_seq_lens = bonus, new_seq_lens
            if self.config.verify_mode != "static":
                rows = self.batch.req_pool_indices
                self.budget_confidence.record(rows, confidence, self.pool.req_generation[rows])

    def _leave(self, idx: List[int]) -> None:
        gone = set(idx)
        keep = [i for i in range(len(self.rows)) if i not in gone]
        for i in idx:
            st = self.rows[i]
            st.kept_draft_ctx, st.draft_pool = st.draft_ctx.clone(), None  # the row goes to the next request
            self.free_rows.append(st.pool_row)
            self.done[st.rid] = st
        b = self.batch
        if not keep:
            self.batch, self.rows = None, []
            return
        k = torch.tensor(keep, dtype=torch.int64)
        b.spec_info.filter_batch(k)
        b.reqs = [b.reqs[i] for i in keep]
        b.req_pool_indices = b.req_pool_indices[k]
        b.seq_lens = b.seq_lens[k]
        if b.spec_info.future_indices is not None:
            b.spec_info.future_indices = b.req_pool_indices
        self.rows = [self.rows[i] for i in keep]

    def step(self) -> StepRecord:
        if self.batch is None:
            raise RuntimeError("step: no live request in the batch")
        seq_lens = self._resolve_inputs()
        anchors = self.batch.spec_info.bonus_tokens.clone()
        rows = self.rows
        temps = torch.tensor([0.0 if st.params.is_greedy else float(st.params.temperature) for st in rows], dtype=F64)
        gumbel, coins, resample = self._noise()
        proposal = self.proposer.propose(self.drafter, [st.cache_tokens for st in rows],
                                         self.draft_pool.batch(self.batch.req_pool_indices), anchors, temps, gumbel)
        lens, budget, planned, budget_conf = self.plan_verify_lens(proposal)
        cand = torch.cat([anchors[:, None], proposal.draft_tokens], dim=1)
        if self.config.decision_dump:
            self.decisions.append(observe.decision(len(self.records), [st.rid for st in rows], cand,
                                                   proposal.confidence, lens))
        logits, hidden, target_tokens, graph_tokens = self._verify_forward(cand, lens)
        logits = penalties.process_block(logits, cand, rows)  # each column reads the output before it
        acc, p, q = self._accept(cand, logits, proposal, lens, temps, coins, resample)
        fin = verify.finalize(seq_lens, proposal.draft_tokens, acc, backend=self.config.verify_backend, check=False)
        # What each sampled row's accept read, and what its drafts were drawn with (observability for contracts).
        self._last_sampled = None if p is None else (
            [(i, st, len(st.cache_tokens)) for i, st in enumerate(rows) if not st.params.is_greedy],
            cand, p, q, proposal.step_logits, temps, gumbel)

        emitted, leaving = [], []
        # One host copy per tensor, not one per row and field.
        commit_lens, correct_lens, out_tokens = fin.commit_len.tolist(), acc.correct_len.tolist(), fin.out_tokens.tolist()
        anchor_ids, drafts = anchors.tolist(), proposal.draft_tokens.tolist()
        self.draft_pool.append(self.batch.req_pool_indices, hidden, fin.commit_len)
        for i, st in enumerate(rows):
            self._commit(st, anchor_ids[i], drafts[i], correct_lens[i])
            out = out_tokens[i][: commit_lens[i]]
            st.local_step += 1
            if self._truncate(st, out):
                leaving.append(i)
            emitted.append(out)
        self._publish(fin.new_seq_lens, acc.bonus, proposal.confidence)
        T = self.T
        rec = StepRecord(
            step=len(self.records), rids=[st.rid for st in rows], seq_lens=seq_lens.tolist(),
            verify_lens=[T] * len(rows) if lens is None else lens.tolist(), planned=planned, budget=budget,
            correct_lens=correct_lens, cap_trim=acc.cap_trim.tolist(), commit_lens=commit_lens,
            new_seq_lens=fin.new_seq_lens.tolist(), emitted=emitted, finished=[rows[i].rid for i in leaving],
            overlap=self.enable_overlap, target_tokens=target_tokens, graph_num_tokens=graph_tokens,
            budget_confidence=None if budget_conf is None else budget_conf.tolist())
        if leaving:
            self._leave(leaving)
        self.records.append(rec)
        return rec

    @property
    def last_laws(self) -> List[StepLaws]:
        """The sampled rows of the last step: what each one's accept read and its drafts were drawn with. Built when
        read, since most steps nobody asks (a row costs a few tensor views)."""
        if self._last_sampled is None:
            return []
        sampled, cand, p, q, draft_logits, temps, gumbel = self._last_sampled
        return [StepLaws(st.rid, st.cache_tokens, n, cand[i].tolist(), st.params, p[i], q[i], draft_logits[i],
                         float(temps[i]), gumbel[i]) for i, st, n in sampled]

    def run_to_completion(self, max_steps: Optional[int] = None, progress=None) -> None:
        if max_steps is not None:
            _validate.nonnegative_int("max_steps", max_steps)
        _check_progress(progress)
        n = 0
        while self.batch is not None and (max_steps is None or n < max_steps):
            rec = self.step()
            n += 1
            if progress is not None:
                progress(rec)

    def generate(self, requests: Sequence[Request], progress=None) -> Dict[int, list]:
        """Prefill the requests, decode until all are done; returns rid -> emitted tokens."""
        requests = _validate.listed("requests", requests)
        _check_progress(progress)
        self.prefill(requests)
        self.run_to_completion(progress=progress)
        return {r.rid: list(self.done[r.rid].output) for r in requests}

    def state_of(self, rid: int) -> RequestState:
        for st in self.rows:
            if st.rid == rid:
                return st
        if rid not in self.done:
            raise ValueError(f"rid: no request {rid!r}, live or done")
        return self.done[rid]

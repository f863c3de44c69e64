"""The overlap-scheduling relay: step N publishes and stashes, step N+1 resolves.

Mirrors `sglang/srt/managers/overlap_utils.py` (FutureMap, RelayPayload) on CPU
tensors. Rows are request-pool rows. The consume-once check is an option
(`strict`), as in SGLang, which runs it only in CI: with it, a resolve of a row
that was not published (seq lens) or stashed (bonus) since it was last resolved
raises. Contract runs keep it off and poison the rows instead, so a stale read
shows as -1 and the contract's own comparison is what catches it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from dspark import _validate
from dspark.device_streams import IMMEDIATE
from dspark.spec_info import SpeculativeAlgorithm

POISON = -1
CONFIDENCE_RELAY_LAG = 2  # SGLang's CONFIDENCE_RELAY_RING_LAG (SGLANG_DSPARK_CONFIDENCE_RELAY_LAG_STEPS)


class ConfidenceRing:
    """Per pool row, the draft confidence each step published and the generation of the request that published it.

    `read` returns the rows as they stood `lag` pushes ago (None before `lag` pushes): SGLang's confidence relay
    ring under overlap, and its host planner's carry without. The writer's generation travels with the values,
    so a reader can tell its own request's history from a previous occupant's.
    """

    def __init__(self, req_pool_size: int, lag: int = CONFIDENCE_RELAY_LAG):
        self.req_pool_size = _validate.positive_int("req_pool_size", req_pool_size)
        self.lag = _validate.positive_int("lag", lag)
        self._history: list = []  # (confidence [P, gamma], generation [P]) after each push, newest last
        self._pushes = 0  # pushes done (the history holds the last `lag` of them)
        self.issued = 0  # pushes a writer issued that complete later (a copy stream's): counted by that writer

    def push(self, rows: torch.Tensor, confidence: torch.Tensor, generation: torch.Tensor) -> None:
        self._check_rows(rows)
        _validate.int_tensor("generation", generation)
        _validate.same_length(rows=rows, generation=generation)
        self.check_confidence(confidence, rows.shape[0])
        if self._history:
            conf, gen = (t.clone() for t in self._history[-1])
        else:
            conf = torch.zeros(self.req_pool_size, confidence.shape[1], dtype=torch.float64)
            gen = torch.zeros(self.req_pool_size, dtype=torch.int64)
        rows = rows.cpu().to(torch.int64)
        conf[rows], gen[rows] = confidence.cpu().to(torch.float64), generation.cpu().to(torch.int64)
        self._history = (self._history + [(conf, gen)])[-self.lag:]
        self._pushes += 1

    def check_confidence(self, confidence, n: int) -> None:
        """Raise unless `confidence` is [n, gamma] probabilities (what a later budget reads as survival factors) of
        the width pushed so far."""
        _validate.matrix("confidence", confidence, rows=n)
        if self.width is not None and self.width != confidence.shape[1]:
            raise ValueError(f"confidence: width {confidence.shape[1]} != relay width {self.width}")
        _validate.probabilities("confidence", confidence)

    @property
    def width(self):
        """gamma of the confidence pushed so far; None before the first push."""
        return self._history[-1][0].shape[1] if self._history else None

    def snapshot(self) -> dict[str, torch.Tensor]:
        """Copies of the history: confidence [pushes, P, gamma] and generation [pushes, P]."""
        conf = [c for c, _ in self._history]
        gen = [g for _, g in self._history]
        return {"ring_confidence": torch.stack(conf) if conf else torch.zeros(0),
                "ring_generation": torch.stack(gen) if gen else torch.zeros(0)}

    def clear(self) -> None:
        """Forget every push (a path that starts again has no history)."""
        self._history = []
        self._pushes = self.issued = 0

    def read(self, rows: torch.Tensor, push: Optional[int] = None):
        """(confidence [n, gamma], writer generation [n]) published `lag` pushes ago, or None. `push` (0-based) names
        the push to read instead, for a reader whose newer pushes may still be in flight (a ring slot)."""
        self._check_rows(rows)
        if push is None:
            if len(self._history) < self.lag:
                return None
            conf, gen = self._history[0]
        else:
            held = push - (self._pushes - len(self._history))
            if not 0 <= held < len(self._history):
                raise RuntimeError(f"ConfidenceRing: push {push} is not held (pushes done {self._pushes}, "
                                   f"holding the last {len(self._history)}): read before its copy completed?")
            conf, gen = self._history[held]
        rows = rows.cpu().to(torch.int64)
        return conf[rows].clone(), gen[rows].clone()

    def _check_rows(self, rows) -> None:
        _validate.int_tensor("rows", rows)
        _validate.in_range("rows", rows, 0, self.req_pool_size)


@dataclass
class RelayPayload:
    """What a step stashes for the next one. For DSPARK only the bonus is relayed."""

    bonus_tokens: torch.Tensor
    topk_p: Optional[torch.Tensor] = None
    topk_index: Optional[torch.Tensor] = None
    hidden_states: Optional[torch.Tensor] = None
    draft_probs: Optional[torch.Tensor] = None
    dsa_topk_indices: Optional[torch.Tensor] = None
    accept_tokens: Optional[torch.Tensor] = None
    accept_lens: Optional[torch.Tensor] = None

    @classmethod
    def from_draft_input(cls, draft_input) -> "RelayPayload":
        return cls(
            bonus_tokens=draft_input.bonus_tokens,
            topk_p=draft_input.topk_p,
            topk_index=draft_input.topk_index,
            hidden_states=draft_input.hidden_states,
            draft_probs=getattr(draft_input, "draft_probs", None),
            dsa_topk_indices=draft_input.dsa_topk_indices,
        )


class BudgetConfidence:
    """What a step's verify budget reads per row: the confidence of CONFIDENCE_RELAY_LAG steps ago, where the row's
    current request wrote it, else 1s (no history: certain, SGLang's optimism). None: nothing resolved yet.

    Under overlap the lagged values come through the FutureMap (published after each verify); without, from this
    planner's own carry (SGLang's host planner), which `record` writes after the step's verify, as the relay is.
    """

    def __init__(self, req_pool_size: int, lag: int = CONFIDENCE_RELAY_LAG):
        self.carry = ConfidenceRing(req_pool_size, lag)

    def read(self, rows: torch.Tensor, confidence: torch.Tensor, generation: torch.Tensor,
             future_map: Optional["FutureMap"] = None) -> Optional[torch.Tensor]:
        """rows [n], this step's confidence [n, gamma], the rows' current generations [n] -> [n, gamma] or None."""
        _validate.int_tensor("rows", rows)
        _validate.int_tensor("generation", generation)
        _validate.matrix("confidence", confidence, rows=rows.shape[0])
        _validate.same_length(rows=rows, generation=generation)
        if future_map is not None:
            lagged = future_map.resolve_confidence(rows)
            if lagged is None:
                return None
        else:
            lagged = self.carry.read(rows)
            if lagged is None:  # an empty carry: generation 0 belongs to no request
                lagged = torch.zeros_like(confidence, dtype=torch.float64), torch.zeros_like(generation)
        conf, writer = lagged
        own = (generation >= 1) & (writer == generation)
        return torch.where(own[:, None], conf, torch.ones_like(conf))

    def record(self, rows: torch.Tensor, confidence: torch.Tensor, generation: torch.Tensor) -> None:
        """The carry's write of a step's confidence (without overlap), after its verify."""
        self.carry.push(rows, confidence, generation)


class FutureMap:
    """A relay indexed by request-pool row; row 0 doubles as the CUDA-graph padding row."""

    def __init__(
        self,
        req_pool_size: int,
        *,
        device: str | torch.device = "cpu",
        spec_algorithm: SpeculativeAlgorithm = SpeculativeAlgorithm.DSPARK,
        poison: bool = False,
        needs_cpu_seq_lens: bool = True,
        strict: bool = False,
        streams=None,
    ):
        self.req_pool_size = _validate.positive_int("req_pool_size", req_pool_size)
        if not isinstance(spec_algorithm, SpeculativeAlgorithm):
            raise TypeError(f"spec_algorithm: expected SpeculativeAlgorithm, got {type(spec_algorithm).__name__}")
        self.device = _validate.device("device", device)
        self.spec_algorithm = spec_algorithm
        self.poison = poison
        self.strict = bool(strict)
        self.needs_cpu_seq_lens = needs_cpu_seq_lens
        self.output_tokens_buf = torch.full((req_pool_size,), POISON, dtype=torch.int64, device=self.device)
        self.new_seq_lens_buf = torch.full((req_pool_size,), POISON, dtype=torch.int64, device=self.device)
        self.confidence_ring = ConfidenceRing(req_pool_size)  # what the budget of a later step reads
        self.dsa_topk_indices_buf: Optional[torch.Tensor] = None  # DSPARK never relays DSA indices
        self._fresh_seq_lens = torch.zeros(req_pool_size, dtype=torch.bool)
        self._fresh_bonus = torch.zeros(req_pool_size, dtype=torch.bool)
        self.publish_ready = None  # set by the first non-empty publish (SGLang: a device Event)
        # The stream surface the confidence relay runs on (dspark.device_streams); the default completes at once.
        self.streams = IMMEDIATE if streams is None else streams
        # The pool's row generations: set, the ring copy reads the writers' generations from the pool as SGLang's CUDA
        # ring does (gen_ring.copy_(pool.req_generation)), so the pool must not reuse a row while that copy is pending.
        self.generation_source: Optional[torch.Tensor] = None
        self._copy_stream = None  # created on the first confidence publish
        self._ring_ready = None  # recorded on the copy stream after each ring copy
        self._slot_ready: list = []  # per ring slot, recorded after the copy into it: what a reader of the slot waits on
        self._staging: Optional[torch.Tensor] = None  # [P, gamma] the forward stream's confidence, read by the copy
        self._staging_gen: Optional[torch.Tensor] = None
        self._slot: Optional[torch.Tensor] = None  # the ring copy's confidence, until its generations land

    # ---- writers (step N) -------------------------------------------------

    def _rows(self, name: str, indices) -> torch.Tensor:
        _validate.int_tensor(name, indices)
        _validate.in_range(name, indices, 0, self.req_pool_size)
        _validate.unique(name, indices)
        return indices.to(device=self.device, dtype=torch.int64)

    def publish(self, indices: torch.Tensor, new_seq_lens: torch.Tensor, confidence: Optional[torch.Tensor] = None,
                generation: Optional[torch.Tensor] = None) -> None:
        """Step N's committed lengths, and with them its draft confidence and the publishing requests'
        generations (SGLang records the writer's generation with each ring copy)."""
        rows = self._rows("indices", indices)
        _validate.int_tensor("new_seq_lens", new_seq_lens, nonnegative=True)
        _validate.same_length(indices=indices, new_seq_lens=new_seq_lens)
        if confidence is not None:
            self.confidence_ring.check_confidence(confidence, rows.numel())
            if generation is None:
                raise ValueError("generation: required with confidence (the publishing requests' row generations)")
            _validate.int_tensor("generation", generation)
            _validate.same_length(indices=indices, generation=generation)
        if rows.numel() == 0:  # a DP-idle rank touches nothing
            return
        self.new_seq_lens_buf[rows] = new_seq_lens.to(self.new_seq_lens_buf)
        if confidence is not None:
            self._relay_confidence(rows.cpu(), confidence, generation)
        self._fresh_seq_lens[rows.cpu()] = True
        self.publish_ready = True

    def stash(self, indices: torch.Tensor, payload: RelayPayload) -> None:
        rows = self._rows("indices", indices)
        if not isinstance(payload, RelayPayload):
            raise TypeError(f"payload: expected RelayPayload, got {type(payload).__name__}")
        _validate.int_tensor("payload.bonus_tokens", payload.bonus_tokens)
        _validate.same_length(indices=indices, bonus_tokens=payload.bonus_tokens)
        if rows.numel() == 0:
            return
        self.output_tokens_buf[rows] = payload.bonus_tokens.to(self.output_tokens_buf)
        self._fresh_bonus[rows.cpu()] = True

    def _relay_confidence(self, rows: torch.Tensor, confidence: torch.Tensor, generation: torch.Tensor) -> None:
        """Step N's confidence into the ring as SGLang's CUDA relay moves it: the forward stream scatters it into a
        staging buffer, a copy stream copies the staged rows and the writers' generations into a host ring slot, and
        `_ring_ready` and the slot's event mark the copy done. The orderings that make it safe: the scatter waits for
        the previous copy (which reads the staging), the copy waits for the scatter, a reader waits for the event of
        the slot it reads (only that one: the newer copies stay in flight), and the pool rows stay in use by the copy
        stream until the copy is done (record_stream)."""
        s = self.streams
        gamma = confidence.shape[1]
        if self._copy_stream is None:
            self._copy_stream, self._ring_ready = s.Stream("relay-copy"), s.Event("ring-ready")
            self._slot_ready = [s.Event(f"ring-slot{k}-ready") for k in range(self.confidence_ring.lag + 1)]
        if self._staging is None or self._staging.shape[1] != gamma:
            self._staging = torch.zeros(self.req_pool_size, gamma, dtype=torch.float64)
            self._staging_gen = torch.zeros(self.req_pool_size, dtype=torch.int64)
        staged = s.mem("relay.confidence_staging", rows)
        conf, gen = confidence.cpu().to(torch.float64), generation.cpu().to(torch.int64)
        if self.confidence_ring.issued:
            self._await_ring_copy()

        def scatter():
            self._staging[rows], self._staging_gen[rows] = conf, gen

        s.launch("scatter confidence into the relay staging", scatter, writes=(staged,))
        scattered = s.Event("confidence-staged")
        scattered.record()
        copy = self._copy_stream
        copy.wait_event(scattered)
        k = self.confidence_ring.issued % (self.confidence_ring.lag + 1)
        slot = s.mem(f"confidence_ring.slot{k}", rows)
        pool_gen, src = s.mem("pool.req_generation", rows), self.generation_source
        self.confidence_ring.issued += 1

        def copy_confidence():
            self._slot = self._staging[rows].clone()

        def copy_generation():
            writers = (src if src is not None else self._staging_gen)[rows].clone()
            self.confidence_ring.push(rows, self._slot, writers)

        with s.stream(copy):
            s.copy_("ring copy of the staged confidence", slot, staged, copy_confidence, non_blocking=True)
            s.copy_("ring copy of the writers' generations", slot, pool_gen if src is not None else staged,
                    copy_generation, non_blocking=True)
        if src is not None:
            self._hold_rows(pool_gen, copy)
        self._mark_copied(k, copy)

    def _await_ring_copy(self) -> None:
        """The forward stream waits for the last ring copy, which still reads the staging it is about to scatter into."""
        self.streams.current_stream().wait_event(self._ring_ready)

    def _hold_rows(self, pool_rows, copy) -> None:
        """The pool rows the copy reads stay in use by its stream: a freed row is not handed out again before then."""
        self.streams.record_stream(pool_rows, copy)

    def _mark_copied(self, slot: int, copy) -> None:
        """The events a later step waits on, recorded on the stream that runs the copy (after it)."""
        self._ring_ready.record(copy)
        self._slot_ready[slot].record(copy)

    # ---- readers (step N+1) ----------------------------------------------

    def _consume(self, what: str, fresh: torch.Tensor, buf: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        stale = ~fresh[rows.cpu()]
        if self.strict and bool(stale.any()):
            bad = rows.cpu()[stale].tolist()
            raise RuntimeError(f"FutureMap: {what} of rows {bad} resolved without a fresh publish/stash (stale relay)")
        out = buf[rows].clone()
        fresh[rows.cpu()] = False
        if self.poison:
            buf[rows] = POISON
        return out

    def _future_rows(self, batch) -> torch.Tensor:
        spec_info = batch.spec_info
        rows = None if spec_info is None else spec_info.future_indices
        if rows is None:
            raise ValueError("batch.spec_info.future_indices: required to resolve from the relay (overlap off?)")
        return self._rows("batch.spec_info.future_indices", rows)

    def resolve_seq_lens(self, batch) -> None:
        """Gather the committed lengths step N published into `batch.seq_lens(_cpu/_sum)`."""
        rows = self._future_rows(batch)
        seq_lens = self._consume("seq lens", self._fresh_seq_lens, self.new_seq_lens_buf, rows)
        batch.seq_lens = seq_lens
        batch.seq_lens_cpu = seq_lens.cpu() if self.needs_cpu_seq_lens else None
        batch.seq_lens_sum = int(seq_lens.sum()) if self.needs_cpu_seq_lens else None

    resolve_seq_lens_cpu = resolve_seq_lens  # SGLang's name

    def resolve_forward_inputs(self, batch) -> None:
        """Gather the bonus tokens (next anchors) step N stashed into the draft input."""
        if not batch.enable_overlap or self.spec_algorithm.is_none():
            return
        spec_info = batch.spec_info
        rows = self._future_rows(batch)
        dsa = spec_info.future_dsa_topk_indices_available
        if dsa and self.dsa_topk_indices_buf is None:  # refused before the bonus is consumed
            raise RuntimeError("FutureMap: draft input claims relayed DSA top-k indices, but none were ever stashed")
        spec_info.bonus_tokens = self._consume("bonus tokens", self._fresh_bonus, self.output_tokens_buf, rows)
        spec_info.dsa_topk_indices = self.dsa_topk_indices_buf[rows] if dsa else None

    def resolve_confidence(self, rows: torch.Tensor):
        """(confidence, writer generation) of `rows` as published CONFIDENCE_RELAY_LAG steps ago, or None before then."""
        rows = self._rows("rows", rows)
        lag = self.confidence_ring.lag
        if self.confidence_ring.issued >= lag:
            slot = (self.confidence_ring.issued - lag) % (lag + 1)
            self._slot_ready[slot].synchronize()  # the host reads a slot only once the copy into it is done
            self.streams.host_read(self.streams.mem(f"confidence_ring.slot{slot}", rows), "the budget's relayed confidence")
            return self.confidence_ring.read(rows, push=self.confidence_ring.issued - lag)
        return None

    def snapshot(self) -> dict[str, torch.Tensor]:
        """Copies of everything a call may change (the relay buffers, the consume-once flags, the confidence ring's
        history), for checking what it touched."""
        return {"output_tokens_buf": self.output_tokens_buf.clone(), "new_seq_lens_buf": self.new_seq_lens_buf.clone(),
                "fresh_seq_lens": self._fresh_seq_lens.clone(), "fresh_bonus": self._fresh_bonus.clone(),
                **self.confidence_ring.snapshot()}

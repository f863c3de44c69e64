"""Confidence relay level on SGLang, CUDA branch: `SGLangRelay` with `ConfidenceRelay` / `FutureMap` taking the path
they take when `is_cuda()` (managers/overlap_utils.py: the pinned ring `conf_ring` / `gen_ring`, filled at each
publish by `issue_ring_copy` on `fwd_prepare_d2h_stream`, and `resolve` reading `CONFIDENCE_RELAY_RING_LAG`
publishes back once the slot's `copy_done` event has completed), run on this CPU.

What is stood in, only inside `cuda_ring_branch()` and only in overlap_utils' own namespace:
* `_is_cuda` (the branch selector, read at `_lazy_init` and `FutureMap.__init__`) is True;
* the device module overlap_utils asks for (`torch.get_device_module(device)`) hands out a stream whose
  `wait_event` / `wait_stream` / `synchronize` and `stream(...)` context do nothing and an event whose `record`
  / `synchronize` / `wait` / `query` complete at once (on CUDA the copies are asynchronous; at once is the
  ordering the ring is written for: resolve reads a slot only after its copy completed);
* `pin_memory=True` allocations are plain host tensors (no pinned allocator without an accelerator).
Every other line is SGLang's own. What it can hide: a race of the asynchronous D2H copy with a later scatter.
`run_confidence_relay_on(case, model)` runs the same branch on the repo's stream model instead
(contracts.adapters.sglang.relay_ring_model): the copy is pending until the model's schedule completes it. The sglang
pack runs RELAY-002 that way, in the model's eager order.

A `pd_decode` case (or one with `RelayStep.prealloc`) runs as a PD decode server's (as `pd_prealloc` below), each
request's row taken at its prealloc step, or at its join step without one.

Engine options (`SGLangCudaRelay(...)`):
* `pd_prealloc` {rid: step} and/or `pd_lead` (steps): the case's requests are PD decode requests: their rows come
  from SGLang's PD decode pool (`disaggregation.decode.DecodeReqToTokenPool.alloc([req])`, as
  `DecodePreallocQueue._pre_alloc` calls it) before step `pd_prealloc[rid]`, else `pd_lead` steps before their join
  step (never before step 0, never after the join) -- while their KV transfer is in flight -- and they join the
  batch at their join step through `process_prebuilt`'s spec path (`build_dspark_disagg_draft_input`:
  `FutureMap.publish` without confidence, and `stash`), as `get_next_disagg_decode_batch_to_run` merges them before
  the decode step; a leaving request is freed with `pool.free(req)`. The pool has `pd_lead * pool_size` extra rows
  (`pre_alloc_size`, as `--disaggregation-decode-extra-slots`), so a pre-allocation always finds a row. Without
  either option the case runs as in `SGLangRelay` (`ReqToTokenPool.alloc_rows` / `free_rows` just before the step).
* `writer_generation_fix`: `writer_generation_fix()` applied (the ring records the generation of the request that
  wrote each row, not the pool's generation at publish).
"""

from __future__ import annotations

import contextlib
import types
from array import array
from types import SimpleNamespace
from typing import Iterator, Mapping, Optional

import torch

from contracts import protocol
from contracts.adapters.sglang import corrections
from contracts.adapters.sglang.device_view import torch_view
from contracts.adapters.sglang.relay import SGLangRelay
from contracts.adapters.sglang.runtime import CPU, runtime
from contracts.boundary.relay import RelayCase, RelayRead
from contracts.patching import patched


class StandInStream:
    """The D2H stream: every ordering call returns at once (the work it would order already ran)."""

    def __init__(self, *a, **k):
        self.waits = 0

    def wait_event(self, event) -> None:
        self.waits += 1

    def wait_stream(self, stream) -> None:
        self.waits += 1

    def synchronize(self) -> None:
        pass


class StandInEvent:
    """A device event that completes when recorded; `records` / `queries` count the calls the ring path makes."""

    def __init__(self, *a, **k):
        self.records = 0
        self.queries = 0

    def record(self, stream=None) -> None:
        self.records += 1

    def query(self) -> bool:
        self.queries += 1
        return True

    def synchronize(self) -> None:
        pass

    def wait(self, stream=None) -> None:
        pass


class RingBranchLog:
    """What the stand-ins saw: the streams and events overlap_utils created under `cuda_ring_branch()`."""

    def __init__(self):
        self.streams: list = []
        self.events: list = []

    def stream(self, *a, **k):
        s = StandInStream()
        self.streams.append(s)
        return s

    def event(self, *a, **k):
        e = StandInEvent()
        self.events.append(e)
        return e

    @property
    def ring_queries(self) -> int:  # ConfidenceRelay.resolve's `copy_done[slot].query()`: the ring branch was read
        return sum(e.queries for e in self.events)


@contextlib.contextmanager
def cuda_ring_branch() -> Iterator[RingBranchLog]:
    """overlap_utils takes its CUDA branch on this CPU (see the module docstring); yields the stand-ins' log."""
    runtime()
    from sglang.srt.managers import overlap_utils as ou

    log = RingBranchLog()
    device_module = types.SimpleNamespace(Stream=log.stream, Event=log.event,
                                          stream=lambda s=None: contextlib.nullcontext())
    # overlap_utils' `torch`, seen through a module whose device module and pinned allocations are the stand-ins.
    view = torch_view(device_module)
    with patched(ou, "_is_cuda", True), patched(ou, "torch", view):
        yield log


@contextlib.contextmanager
def writer_generation_fix() -> Iterator[None]:
    """The minimal correction (`corrections.writer_generation_recorded`, RELAY-002's in the ledger): `ConfidenceRelay`
    keeps, per row, the generation of the request whose confidence the row holds (recorded at `scatter`), and
    `issue_ring_copy` copies that into `gen_ring[slot]` instead of the pool's generation at publish."""
    import pytest

    runtime()
    with pytest.MonkeyPatch.context() as mp:
        corrections.writer_generation_recorded(mp)
        yield


class SGLangCudaRelay(SGLangRelay):
    """The relay level with overlap_utils on its CUDA branch (`relay_path = "cuda"`); see the module docstring."""

    name = "sglang-cuda-relay"
    device = "cpu"
    relay_path = "cuda"
    capabilities = frozenset({protocol.RELAY, protocol.RELAY_PREALLOC, protocol.RELAY_STREAMS})
    known_failures = ()

    def __init__(self, *, pd_prealloc: Optional[Mapping[int, int]] = None, pd_lead: Optional[int] = None,
                 writer_generation_fix: bool = False):
        runtime()
        self.pd = pd_prealloc is not None or pd_lead is not None
        self.pd_prealloc = dict(pd_prealloc or {})
        self.pd_lead = int(pd_lead or 0)
        self.fix = writer_generation_fix
        self.last_log: Optional[RingBranchLog] = None
        self.last_relay = None

    @property
    def engine_spec(self) -> str:
        """Loadable (`replay`, `--engine`) in the default configuration; otherwise the options, for reports."""
        opts = [f"pd_prealloc={self.pd_prealloc}", f"pd_lead={self.pd_lead}"] if self.pd else []
        opts += ["writer_generation_fix=True"] if self.fix else []
        here = f"{__name__}:{type(self).__name__}"
        return here if not opts else f"{here}({', '.join(opts)})"

    def run_confidence_relay(self, case: RelayCase) -> list:
        return self._run(case, None)

    def run_confidence_relay_on(self, case: RelayCase, streams) -> list:
        """The same, with the branch's streams, events and ring copy on `streams` (a `contracts.streams.StreamModel`:
        contracts.adapters.sglang.relay_ring_model) instead of the stand-ins."""
        return self._run(case, streams)

    def _run(self, case: RelayCase, streams) -> list:
        from contracts.adapters.sglang.relay_ring_model import ring_branch_on

        with contextlib.ExitStack() as stack:
            if streams is None:
                self.last_log = stack.enter_context(cuda_ring_branch())
            else:
                self.last_log = None
                stack.enter_context(ring_branch_on(streams))
            if self.fix:
                stack.enter_context(writer_generation_fix())
            prealloc = case.pd_decode or any(step.prealloc for step in case.steps)
            if not (self.pd or prealloc) or not case.overlap:  # without overlap no relay: the planner's own carry
                return self._run_local(case)
            return self._run_pd_decode(case)

    def _run_pd_decode(self, case: RelayCase) -> list:
        """As `SGLangRelay.run_confidence_relay`, with the rows of a PD decode server (see `pd_prealloc`)."""
        rt = runtime()
        from sglang.srt.disaggregation.decode import DecodeReqToTokenPool
        from sglang.srt.managers.overlap_utils import FutureMap
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.model_executor.forward_batch_info import ForwardMode
        from sglang.srt.sampling.sampling_params import SamplingParams
        from sglang.srt.speculative.dspark_components import dspark_planner
        from sglang.srt.speculative.dspark_components.dspark_draft import make_next_draft_input
        from sglang.srt.speculative.dspark_disaggregation import build_dspark_disagg_draft_input
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        pool = DecodeReqToTokenPool(size=case.pool_size, max_context_len=8, device="cpu", enable_memory_saver=False,
                                    pre_alloc_size=self.pd_lead * case.pool_size)
        planner = self._relay_planner(case, pool)
        fm = FutureMap(CPU, SpeculativeAlgorithm.DSPARK, pool, needs_cpu_seq_lens=True, needs_confidence_relay=True)
        self.last_relay = fm.confidence_relay
        joins, taken = {rid: s for s, step in enumerate(case.steps) for rid in step.join}, case.taken()
        alloc_at = {rid: max(0, min(self.pd_prealloc.get(rid, taken[rid] if taken[rid] < s else s - self.pd_lead), s))
                    for rid, s in joins.items()}
        seen = []
        real = dspark_planner.compute_verify_token_budget

        def recording(*, history_survival_probs, **kw):
            seen.append(history_survival_probs.clone())
            return real(history_survival_probs=history_survival_probs, **kw)

        def new_req(rid):
            params = SamplingParams(max_new_tokens=8)
            params.normalize(None)
            req = Req(f"pd{rid}", "", array("q", [1, 2]), params, vocab_size=32)
            req.output_ids.append(3)
            return req

        reqs, reads = {}, []
        with patched(dspark_planner, "compute_verify_token_budget", recording), \
                rt.config(num_draft_tokens=case.gamma + 1, overlap=True):
            for s, (step, rids) in enumerate(zip(case.steps, case.batches())):
                for rid in step.leave:  # release_kv_cache of a finished request
                    pool.free(reqs.pop(rid))
                for rid in sorted(r for r, t in alloc_at.items() if t == s):  # DecodePreallocQueue._pre_alloc
                    reqs[rid] = new_req(rid)
                    if pool.alloc([reqs[rid]]) is None:
                        raise ValueError(f"pool_size: no free row to pre-allocate request {rid} at step {s}")
                if step.join:  # the transferred requests' prebuilt batch, merged into the running batch
                    rows = torch.tensor([reqs[r].kv.req_pool_idx for r in step.join], dtype=torch.int64)
                    prebuilt = SimpleNamespace(enable_overlap=True, req_pool_indices=rows,
                                               seq_lens=torch.full((len(rows),), 3, dtype=torch.int64))
                    build_dspark_disagg_draft_input(prebuilt, torch.full((len(rows),), 3, dtype=torch.int64), fm)
                idx = torch.tensor([reqs[r].kv.req_pool_idx for r in rids], dtype=torch.int64)
                conf = torch.tensor([case.confidence(r, s) for r in rids], dtype=torch.float32)
                di = make_next_draft_input(bonus_tokens=torch.ones(len(rids), dtype=torch.int64),
                                           new_seq_lens=torch.ones(len(rids), dtype=torch.int64))
                di.future_indices = idx
                batch = SimpleNamespace(spec_info=di, forward_mode=ForwardMode.DECODE, is_extend_in_batch=False,
                                        req_pool_indices=idx, req_pool_indices_cpu=idx, batch_size=lambda n=len(rids): n)
                seen.clear()
                planner.prepare_verify_budget(batch, fm)
                budget = planner.resolve_verify_token_budget(draft_input=di, confidence=conf,
                                                             prefix_lens=torch.zeros_like(idx), req_pool_indices=idx)
                survival = None if budget is None or not seen else seen[-1].to(torch.float64).tolist()
                reads.append(RelayRead(tuple(rids), survival))
                fm.publish(idx, torch.ones(len(rids), dtype=torch.int64), confidence=conf)
        return reads

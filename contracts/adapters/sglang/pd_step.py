"""The `step` level on SGLang as a PD decode server (engine `sglang-pd`): every request joins through SGLang's own
PD decode path, then decodes with DSpark in the same Scheduler.

The decode server is SGLang's real Scheduler built with `disaggregation_mode="decode"` and the `fake` transfer
backend, run one iteration at a time as `event_loop_normal_disagg_decode` / `event_loop_overlap_disagg_decode`
run it: `process_decode_queue` (the prealloc queue's admission and KV allocation, the transfer queue's
`pop_transferred`), `get_next_disagg_decode_batch_to_run` (`prepare_for_prebuilt`, `process_prebuilt` with
`build_dspark_disagg_draft_input` and the FutureMap under overlap, merged into the running batch), `run_batch`,
`process_batch_result`. A request enters through `process_input_requests` with its bootstrap address and room.

The prefill server is SGLang's own prefill: a second Scheduler in the normal mode prefills the requests and samples
their first tokens, as a PD prefill server's forward does. What the transfer engine would then move is moved by the
adapter, and only that (contracts.adapters.sglang.pd_step.handoff): the prompt's KV rows, target and draft pools,
copied from the prefill Scheduler's slots into the slots the decode server allocated, and the first token and
bootstrap room written into the decode server's metadata row with SGLang's own `MetadataBuffers.set_buf`.

Stand-ins, and what they can hide:
  - the transfer itself (the fake backend moves nothing; the adapter copies the KV rows and the metadata row once the
    request is in the transfer queue): bugs in a real backend's transfer, its polling and its failure handling;
  - the bootstrap server's answer about the prefill side (`prefill_info_table`: one DP rank, rooms followed): prefill
    DP layouts other than one rank;
  - the prefill server's own PD machinery (`disaggregation_mode="prefill"` refuses the fake backend): bugs in what a
    prefill server adds around its forward (its bootstrap queue, its sender). Its requests carry every sampling
    parameter (the first token's penalties, min_new_tokens mask, logit bias and min_p apply there), with one more
    token of budget and `ignore_eos` so that no stop ends them before their KV is read (in SGLang ignore_eos changes
    no logit, only the finish check and admission's token estimate): hides a prefill server that finishes a request
    on its first token differently;
  - everything the step level lists for the normal mode (contracts.adapters.sglang.step).
"""

from __future__ import annotations

from types import SimpleNamespace

from contracts.adapters.sglang.step import SGLangStep, _Slot, cached_slot

PD_HOST, PD_PORT = "10.255.0.1", 8998  # the prefill side's bootstrap address: never connected to (fake backend)


class _DecodeSlot(_Slot):
    """A Scheduler in PD decode mode on the fake transfer backend."""

    def __init__(self, gamma: int, overlap: bool, sample_from_anchor: bool, options=None):
        # A host-memory retraction backup builds a pinned host pool (CUDA only); SGLang's CPU tensor backup does not.
        # The decode reservation per admitted request is 16 tokens, not 512: the contracts' requests decode at most a
        # few dozen, and DIST-001 hands over 1,000 at once into the step level's 32,768 KV slots (at 512 the server
        # would admit 63 and hold the rest in its prealloc queue).
        super().__init__(gamma, overlap, sample_from_anchor, options=options, disaggregation_mode="decode",
                         disaggregation_transfer_backend="fake", disaggregation_decode_retraction_backup="cpu_tensor",
                         num_reserved_decode_tokens=16)
        from sglang.srt.disaggregation.decode import _bootstrap_addr

        kv_manager = self.scheduler.disagg_decode_prealloc_queue.kv_manager
        addr = _bootstrap_addr(SimpleNamespace(bootstrap_host=PD_HOST, bootstrap_port=PD_PORT))
        kv_manager.prefill_info_table = {addr: SimpleNamespace(dp_size=1, follow_bootstrap_room=True)}

    def busy(self) -> bool:
        s = self.scheduler
        return super().busy() or bool(s.disagg_decode_prealloc_queue.queue) or bool(s.disagg_decode_transfer_queue.queue)

    def iterate(self):
        """One iteration of event_loop_normal_disagg_decode / event_loop_overlap_disagg_decode; under overlap the
        queued result is processed before returning (the step level's quiescent step)."""
        s = self.scheduler
        s.disagg_decode_prealloc_queue.prefetch_prefill_dp_rank_queries()
        s.ingest_requests()
        s.process_decode_queue()
        plan = s.get_next_disagg_decode_batch_to_run(running_batch=s.running_batch)
        s.running_batch = plan.running_batch
        batch = s.ngram_embedding_manager.prepare_for_forward(plan.batch_to_run, chunked_req=s.chunked_req)
        s.cur_batch_for_debug = batch
        if not self.overlap:
            if batch:
                s.process_batch_result(batch, s.run_batch(batch))
            else:
                s._sched_idled = True
                s.on_idle()
            s.last_batch = batch
            return batch
        disable = s.is_disable_overlap_for_batch(batch, last_batch=s.last_batch)
        if disable and s.last_batch and s.result_queue:
            self._pop_and_process()
        result = None
        if batch:
            result = s.run_batch(batch)
            s._apply_war_barrier()
            s.result_queue.append((batch.copy(), result))
        else:
            s._sched_idled = True
        if s.last_batch and not disable and s.result_queue:
            self._pop_and_process()
        elif not s.last_batch and batch is None:
            s.on_idle()
        s.launch_batch_sample_if_needed(result, batch)
        while s.result_queue:
            self._pop_and_process()
        s.last_batch = batch
        return batch


def _pools(scheduler) -> tuple:
    """The target's and the drafter's KV pools (DSpark's drafter keeps its own)."""
    return (scheduler.tp_worker.model_runner.token_to_kv_pool,
            scheduler.draft_worker.draft_model_runner.token_to_kv_pool)


def _kv_rows(slot: _Slot, req, n: int) -> list:
    slots = slot.row_slots(req, n)
    return [([k[slots].clone() for k in pool.k_buffer], [v[slots].clone() for v in pool.v_buffer])
            for pool in _pools(slot.scheduler)]


def _write_kv_rows(slot: _Slot, req, n: int, rows: list) -> None:
    slots = slot.row_slots(req, n)
    for pool, (ks, vs) in zip(_pools(slot.scheduler), rows):
        for buf, val in zip(pool.k_buffer, ks):
            buf[slots] = val
        for buf, val in zip(pool.v_buffer, vs):
            buf[slots] = val


def handoff(dslot: _DecodeSlot, rid: str, room: int, first_token: int, kv: list, prompt_len: int) -> bool:
    """What the transfer engine does once the decode server has allocated the request: the prompt's KV rows into its
    slots, and the prefill's metadata (first token, bootstrap room) into its metadata row, written by SGLang's own
    `MetadataBuffers.set_buf`. False while the request has not reached the transfer queue."""
    s = dslot.scheduler
    pending = [d for d in s.disagg_decode_transfer_queue.queue if d.req.rid == rid]
    if not pending:
        return False
    d = pending[0]
    _write_kv_rows(dslot, d.req, prompt_len, kv)
    bufs, idx = s.disagg_metadata_buffers, d.metadata_buffer_index
    sent = SimpleNamespace(metadata_buffer_index=idx, output_ids=[first_token], cached_tokens=0, cached_tokens_device=0,
                           cached_tokens_host=0, cached_tokens_storage=0, get_mm_token_counts=lambda: (0, 0, 0),
                           return_logprob=False, return_sampling_mask=False, hidden_states_tensor=None,
                           output_dsa_topk_indices=None, bootstrap_room=room)
    bufs.set_buf(sent)
    bufs.bootstrap_room[idx, 0] = room
    return True


def _stop_ids(r) -> set:
    """The tokens that end the request (Req._check_token_based_finish: none under ignore_eos, which in SGLang turns
    the stop token ids off too; the request's EOS id is one of its stop token ids, `step.sampling_fields`)."""
    return set() if r.ignore_eos else set(r.stop_token_ids) | ({r.eos_id} if r.eos_id is not None else set())


class SGLangPdStep(SGLangStep):
    """The step level with every request joining through the PD decode path (capability step.pd-decode)."""

    def _slot_for(self, spec):
        from contracts.adapters.sglang.options import option_slot

        g, overlap, sfa = spec.gamma, spec.enable_overlap, spec.sample_from_anchor
        return (option_slot(spec, lambda env: _DecodeSlot(g, overlap, sfa, options=env))
                or cached_slot(("pd-decode", g, overlap, sfa), lambda: _DecodeSlot(g, overlap, sfa)))

    def add_requests(self, handle, requests, via):
        self._own(handle)
        if via not in ("local", "pd"):
            raise ValueError(f"via: expected 'local' or 'pd', got {via!r}")
        requests = list(requests)
        self._check_requests(handle, requests)
        firsts, kvs = self._prefill(handle, requests)
        dslot, s = handle.slot, handle.slot.scheduler
        handle.adds += 1
        rooms = {r.rid: (handle.generation << 20) + (handle.adds << 12) + i + 1 for i, r in enumerate(requests)}
        tokenized = []
        for r in requests:
            t = self._tokenized(handle, r)
            t.bootstrap_host, t.bootstrap_port, t.bootstrap_room = PD_HOST, PD_PORT, rooms[r.rid]
            tokenized.append(t)
        names = {self._sglang_rid(handle, r): r for r in requests}
        with dslot.env():
            s.process_input_requests(tokenized)
            waiting = set(names)
            for _ in range(len(requests) + 4):
                s.process_decode_queue()
                for name in sorted(waiting):
                    r = names[name]
                    if handoff(dslot, name, rooms[r.rid], firsts[r.rid], kvs[r.rid], len(r.prompt)):
                        waiting.discard(name)
                if not waiting:
                    break
            s.process_decode_queue()  # pop_transferred: the handed-over requests to the waiting queue
            for q in s.waiting_queue:
                if q.rid in names:
                    handle.reqs[names[q.rid].rid] = q
        for r in requests:
            handle.specs[r.rid] = r
            handle.added.append(r.rid)
            # The contracts' engine is quiescent after an admission: a request its first token ends (its length,
            # its stop token) is finished now, as SGLang's next iteration finishes it (process_batch_result_prebuilt,
            # before any decode); step() fails loudly if SGLang decodes it all the same.
            if r.rid in handle.reqs:
                first = firsts[r.rid]
                if first in _stop_ids(r):
                    handle.handoff_done[r.rid] = "stop"
                elif r.max_new_tokens <= 1:
                    handle.handoff_done[r.rid] = "length"
        missing = [r.rid for r in requests if r.rid not in handle.reqs]
        if missing:
            raise RuntimeError(f"SGLang's decode server did not take over requests {missing} (prealloc "
                               f"{len(s.disagg_decode_prealloc_queue.queue)}, transfer "
                               f"{len(s.disagg_decode_transfer_queue.queue)}, waiting {len(s.waiting_queue)})")

    def _prefill(self, handle, requests) -> tuple:
        """SGLang's own prefill of the requests on the prefill server: each one's first token and prompt KV rows."""
        g, sfa = handle.spec.gamma, handle.spec.sample_from_anchor
        pslot = cached_slot(("pd-prefill", g, sfa), lambda: _Slot(g, False, sfa))  # not the decode handles' own
        pslot.reset()
        pslot.load(handle.models)
        pslot.reseed(handle.spec.seed * 1_000_003 + handle.adds)  # each admission's prefill draws afresh
        s = pslot.scheduler
        names = {self._sglang_rid(handle, r): r for r in requests}
        firsts, kvs = {}, {}
        with pslot.env():
            # A prefill server only prefills: no stop token or length ends a request there (the decode server
            # applies them to the first token), so every prompt's KV is still held when it is read.
            s.process_input_requests([self._tokenized(handle, r, prefill_only=True) for r in requests])
            for _ in range(len(requests) + 4):
                batch = pslot.iterate()
                for q in (batch.reqs if batch is not None and batch.forward_mode.is_extend() else []):
                    r = names.get(q.rid)
                    if r is not None and q.output_ids and r.rid not in firsts:
                        firsts[r.rid] = int(q.output_ids[0])
                        kvs[r.rid] = _kv_rows(pslot, q, len(r.prompt))
                if len(firsts) == len(requests):
                    break
        if len(firsts) != len(requests):
            raise RuntimeError(f"SGLang's prefill server did not prefill requests "
                               f"{sorted(set(r.rid for r in requests) - set(firsts))}")
        pslot.reset()  # the prefill server lets them go once transferred
        return firsts, kvs

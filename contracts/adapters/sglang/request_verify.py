"""`request.verify` on SGLang: a ragged greedy batch of whole requests through DSpark's verify as its worker runs it.

What runs is SGLang's own code, in the order the scheduler and `DSparkWorkerV2` run it for one decode step:
* each request as the TokenizerManager and scheduler build it: `SamplingParams` from the step level's
  `sampling_fields` (the EOS id among the stop token ids), `normalize` with the stand-in tokenizer and
  `verify(vocab)` (a request SGLang refuses raises), a `Req` holding the row's prompt and committed output, the
  scheduler's tokenizer on it (`req.tokenizer`, which the min_new_tokens penalizer reads);
* its penalizers fed the committed output the way plain decoding feeds them: a one-request `ScheduleBatch.init_new`
  with the `SamplingBatchInfo.from_schedule_batch` its prefill builds, then one `cumulate_penalty_output_tokens` per
  output token (what each decode step's `prepare_for_decode` calls). Under DSpark SGLang feeds nothing (REQ-004's
  finding); feeding them here keeps that cause out of REQ-005, which then holds the verify alone to what it reads;
* the rows joined into one batch in the case's order by `SamplingBatchInfo.merge_batch` (the part of
  `ScheduleBatch.merge_batch` that merges the penalizer orchestrators and logit bias; see Substituted), and the
  forward copy the worker is handed, `copy_for_forward()` (as `Scheduler._forward_isolation` makes it);
* `TargetVerifyExecutor.run_non_compact` (SGLang's constructor; the verify forward, then
  `apply_dflash_verify_logits_adjustments`), then its `accept_and_finalize` (`accept_draft_tokens`: `AcceptGreedy`
  with the cutoff lengths; `build_accept_outs`). Rows are ragged as the planner makes them in cap-accept mode
  (SGLANG_RAGGED_VERIFY_MODE=cap-accept): every row computes gamma + 1 columns and a `RaggedVerifyLayout` built as
  `DSparkVerifyPlanner.schedule_layout` builds it (`verify_layout_grid`, `verify_layout_graph_num_tokens_floor`)
  cuts each row's accept at its verify length. A row emits `out_tokens[:commit_len]`.

Substituted (and what each can hide):
* the target's verify forward (`TargetVerifyExecutor._forward_prepared_verify`, on this executor only) returns the
  case's logits as float32 `next_token_logits` (the LM head's dtype), 0 past a row's verify length (what compact
  mode's `ScatterCompactToStrided` fills). Hides: the verify forward batch (positions, KV locations, attention) and
  the compact path's pack and scatter; the step level runs the forward.
* the executor's `target_worker` is a namespace holding the real `ModelConfig` and an attention backend without
  `make_forward_metadata_from_raw_verify` (torch_native's answer); its KV injector is None (no commit runs here).
  Hides: a target model type that fuses the argmax (`_FUSED_ARGMAX_TARGETS`), which takes another greedy path.
* the verify window: `VerifyWindow` with the positions the anchor's place gives and zero KV locations, no
  `KVLocPlan` (read only by the forward substituted above). Hides: the window's allocation (the kv level).
* the undrafted tail of a short row (its drafts past its verify length) is token 0: the drafter drafts gamma
  tokens and the planner cuts the verify; the tail is never accepted. Hides: nothing the accept reads.
* the merge: per-row batches hold no KV pool rows, so only the sampling half of `ScheduleBatch.merge_batch` runs
  (`SamplingBatchInfo.merge_batch`, then the requests appended), and the verify batch is `ScheduleBatch.init_new`
  of every request. Hides: a merge bug in the KV half (the step level merges real running batches).
"""

from __future__ import annotations

from array import array
from types import SimpleNamespace

import torch

from contracts.adapters.sglang.runtime import CPU, runtime, single_rank_tp_sync
from contracts.boundary.verify import RequestVerifyCase


def _request(i: int, row, vocab: int):
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    from contracts.adapters.sglang.step import STAND_IN_TOKENIZER, sampling_fields

    params = SamplingParams(**sampling_fields(row.request))
    params.normalize(STAND_IN_TOKENIZER)  # the TokenizerManager's admission, with the scheduler's tokenizer
    params.verify(vocab)
    req = Req(f"rv-{i}", "", array("q", row.request.prompt), params, vocab_size=vocab)
    req.tokenizer = STAND_IN_TOKENIZER  # Scheduler.handle_generate_request: req.tokenizer = self.tokenizer
    return req


def _fed_batch(rt, pools, req, output, vocab: int):
    """A one-request batch whose penalizers saw `output` one decode step at a time, as plain decoding feeds them."""
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

    batch = rt.schedule_batch(pools, [req], enable_overlap=False)
    batch.sampling_info = SamplingBatchInfo.from_schedule_batch(batch, vocab)  # prepare_for_extend builds it
    for tok in output:
        req.output_ids.append(int(tok))  # process_batch_result commits the token ...
        batch.cumulate_penalty_output_tokens()  # ... the next prepare_for_decode feeds it
    return batch


def _layout(lens, T: int):
    """The cap-accept layout `DSparkVerifyPlanner.schedule_layout` builds from scheduled verify lengths."""
    from sglang.srt.speculative.dspark_components.dspark_planner import (
        verify_layout_graph_num_tokens_floor,
        verify_layout_grid,
    )
    from sglang.srt.speculative.ragged_verify import RaggedVerifyLayout, RaggedVerifyMode

    mode = RaggedVerifyMode.CAP_ACCEPT
    grid = verify_layout_grid(verify_lens_cpu=lens, ragged_verify_mode=mode, model_runner=None)
    floor = verify_layout_graph_num_tokens_floor(num_reqs=len(lens), ragged_verify_mode=mode,
                                                 verify_num_draft_tokens=T, model_runner=None)
    return RaggedVerifyLayout.from_verify_lens(verify_lens_cpu=lens, device=CPU, grid=grid,
                                               graph_num_tokens_floor=floor)


def _executor(rt, T: int, logits: torch.Tensor):
    from sglang.srt.speculative.dspark_components.dspark_verify import TargetVerifyExecutor, TargetVerifyResult

    worker = SimpleNamespace(model_runner=SimpleNamespace(model_config=rt.model_config, attn_backend=object()))
    executor = TargetVerifyExecutor(target_worker=worker, gamma=T - 1, verify_num_draft_tokens=T,
                                    model_runner=worker.model_runner, kv_injector=None, tp_sync=single_rank_tp_sync())
    executor._forward_prepared_verify = lambda **kw: TargetVerifyResult(  # the target's forward: the case's logits
        logits_output=SimpleNamespace(next_token_logits=logits, hidden_states=None), can_run_cuda_graph=False)
    return executor


class SGLangRequestVerify:
    def verify_requests(self, case: RequestVerifyCase) -> list:
        rt = runtime()
        from sglang.srt.speculative.dspark_components.dspark_draft import DraftBlockResult, make_next_draft_input
        from sglang.srt.speculative.dspark_components.dspark_planner import VerifyWindow

        bs, T, V = len(case.rows), case.gamma + 1, case.vocab
        pools = rt.pools(pool_size=max(bs, 1), kv_slots=1, context_len=8)
        reqs = [_request(i, row, V) for i, row in enumerate(case.rows)]
        fed = [_fed_batch(rt, pools, req, row.output, V) for req, row in zip(reqs, case.rows)]
        running, info = fed[0], fed[0].sampling_info
        for other in fed[1:]:  # the running batch absorbing each request, in the case's order (merge_batch's order:
            info.merge_batch(other.sampling_info)  # the orchestrators first, preparing with the requests before it)
            running.reqs = running.reqs + other.reqs
        batch = rt.schedule_batch(pools, reqs, enable_overlap=False)
        info.penalizer_orchestrator.batch = batch  # the orchestrator reads the merged batch's requests
        batch.sampling_info = info

        cand = torch.zeros(bs, T, dtype=torch.int64)
        logits = torch.zeros(bs, T, V, dtype=torch.float32)
        for i, row in enumerate(case.rows):
            n = len(row.drafts)
            cand[i, : n + 1] = torch.tensor((row.output[-1],) + tuple(row.drafts))
            logits[i, : n + 1] = torch.tensor(row.logits, dtype=torch.float32)
        logits = logits.reshape(bs * T, V)
        prefix = torch.tensor([len(r.request.prompt) + len(r.output) - 1 for r in case.rows], dtype=torch.int64)
        positions = prefix[:, None] + torch.arange(T)
        window = VerifyWindow(positions_2d=positions, verify_cache_loc=torch.zeros(bs * T, dtype=torch.int64),
                              verify_cache_loc_2d=torch.zeros(bs, T, dtype=torch.int64), kv_loc_plan=None)

        forward_info = info.copy_for_forward()  # Scheduler._forward_isolation: what the worker is handed
        temps = forward_info.temperatures.view(-1).clamp(min=1e-5)
        drafts = cand[:, 1:].contiguous()
        block = DraftBlockResult(draft_tokens=drafts, corrected_logits=None, greedy_mask=forward_info.top_ks.view(-1) <= 1,
                                 temperatures=temps, greedy_draft=True)
        di = make_next_draft_input(bonus_tokens=cand[:, 0].clone(), new_seq_lens=prefix)
        executor = _executor(rt, T, logits)
        verified = executor.run_non_compact(batch=batch, draft_input=di, verify_ids_2d=cand, verify_window=window,
                                            sampling_info=forward_info)
        out = executor.accept_and_finalize(
            folded_accept=False, bs=bs, verify_ids_2d=cand, target_logits=verified.logits_output.next_token_logits,
            draft_block=block, sampling_info=forward_info, draft_input=di,
            layout=_layout([len(r.drafts) + 1 for r in case.rows], T), prefix_lens=prefix, draft_tokens=drafts)
        return [[int(t) for t in out.out_tokens[i, : int(out.commit_lens[i])]] for i in range(bs)]

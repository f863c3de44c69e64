"""Draft level on SGLang: one decode step's draft forward (`DraftBlockProposer.propose` over the verify window
`alloc_verify_window` reserved) and the commit after its verify (`TargetVerifyExecutor.commit_hidden`)."""

from __future__ import annotations

import torch

from contracts.adapters.sglang.draft import DRAFT_VOCAB, build_draft_side, commit_inject, propose
from contracts.adapters.sglang.runtime import CPU, cpu_kernels, runtime, single_rank_tp_sync
from contracts.boundary.draft import DraftCase, DraftObservation, OracleDraftObservation


def _greedy(b: int, position: int) -> int:
    """The oracle's stand-in for the target's greedy continuation: the token at `position` of request `b`."""
    return (7 * b + 13 * position + 3) % (DRAFT_VOCAB - 1)  # never the mask token


class SGLangDraft:
    def _decode_batch(self, rt, case: DraftCase, oracle=None):
        from sglang.srt.managers.overlap_utils import FutureMap

        T, bs = case.gamma + 1, case.bs
        pools = rt.pools(pool_size=bs, kv_slots=sum(case.prefix_lens) + bs * (2 * T + 1) + 1)
        reqs = [rt.prebuilt_request(pools, f"r{i}", n, tok) for i, (n, tok) in
                enumerate(zip(case.prefix_lens, case.bonus_tokens))]
        batch = rt.schedule_batch(pools, reqs, enable_overlap=False)
        batch.prepare_for_prebuilt()
        batch.process_prebuilt(FutureMap(CPU, batch.spec_algorithm, pools.req_to_token_pool))
        with cpu_kernels():
            batch.prepare_for_decode()  # reserves the verify window's slots
        side = build_draft_side(gamma=case.gamma, sample_from_anchor=case.sample_from_anchor, dp_moe_sync=False,
                                enable_num_token_non_padded=False, req_to_token_pool=pools.req_to_token_pool,
                                allocator=pools.allocator, seed=case.seed, oracle=oracle)
        return pools, batch, side

    def oracle_draft_verify(self, case: DraftCase) -> OracleDraftObservation:
        """SGLang's proposer with an oracle draft head, then `accept_draft_tokens` (greedy) and `build_accept_outs`
        against target logits whose argmax after position n+j is the oracle's token at n+j+1."""
        rt = runtime()

        from sglang.srt.speculative.dspark_components.dspark_verify import accept_draft_tokens, build_accept_outs
        from sglang.srt.speculative.spec_tp_sync import SpecTpSyncSite

        T, bs = case.gamma + 1, case.bs
        with rt.config(num_draft_tokens=T):
            _, batch, side = self._decode_batch(rt, case, oracle=_greedy)
            proposal, _ = propose(side, batch, dp_moe_sync=False, enable_num_token_non_padded=False)
            drafts = proposal.draft_block.draft_tokens
            cand = torch.cat([batch.spec_info.bonus_tokens.view(-1, 1), drafts], 1)
            argmax = torch.tensor([[_greedy(b, n + j + 1) for j in range(T)] for b, n in enumerate(case.prefix_lens)])
            logits = torch.zeros(bs, T, DRAFT_VOCAB).scatter_(2, argmax[:, :, None], 1.0).reshape(bs * T, DRAFT_VOCAB)
            correct, bonus, trim = accept_draft_tokens(
                candidates=cand, target_logits=logits, draft_block=proposal.draft_block, sampling_info=None,
                draft_input=batch.spec_info, gamma=case.gamma, verify_num_draft_tokens=T)
            out = build_accept_outs(correct_len=correct.clone(), bonus=bonus.clone(), cap_trim_lens=trim.clone(),
                                    prefix_lens=batch.seq_lens, draft_tokens=drafts, gamma=case.gamma,
                                    verify_num_draft_tokens=T, tp_sync=single_rank_tp_sync(),
                                    sync_site=SpecTpSyncSite.DSPARK_ACCEPT_GREEDY)
        per = lambda t: tuple(tuple(int(x) for x in row) for row in t.tolist())  # noqa: E731
        return OracleDraftObservation(per(drafts), per(argmax), tuple(int(x) for x in out.correct_len.tolist()),
                                      tuple(int(x) for x in out.commit_lens.tolist()))

    def draft_step(self, case: DraftCase) -> DraftObservation:
        rt = runtime()
        T, bs = case.gamma + 1, case.bs
        with rt.config(num_draft_tokens=T):
            pools, batch, side = self._decode_batch(rt, case)
            proposal, window = propose(side, batch, dp_moe_sync=False, enable_num_token_non_padded=False)
            inject = commit_inject(side, batch, window, torch.tensor(case.commit_lens, dtype=torch.int32), pools)
        fb = side.runner.batches[-1]
        q = side.proposer.query_token_num
        r2t = pools.req_to_token_pool.req_to_token
        rows = batch.req_pool_indices.tolist()
        # Rows as wide as the forward made them: a forward of the wrong width is the contract's to report, not a
        # reshape error here.
        per = lambda t, w=-1: tuple(tuple(int(x) for x in row) for row in t.reshape(bs, w).tolist())  # noqa: E731
        loc = inject["swa_loc"].reshape(bs, T)
        return DraftObservation(
            query_width=q, mask_token_id=int(side.proposer._mask_token_id),
            input_ids=per(fb.input_ids), positions=per(fb.positions), cache_locs=per(fb.out_cache_loc),
            row_slots=tuple(tuple(int(x) for x in r2t[r, n: n + T].tolist()) for r, n in zip(rows, case.prefix_lens)),
            draft_tokens=per(proposal.draft_block.draft_tokens, case.gamma),
            inject_written=tuple(tuple(bool(x >= 0) for x in row) for row in loc.tolist()),
            inject_positions=per(inject["positions"], T), inject_rows=per(inject["main_hidden"][:, 0].to(torch.int64), T))

"""Draft level on SGLang: one decode step's draft forward (`DraftBlockProposer.propose` over the verify window
`alloc_verify_window` reserved) and the commit after its verify (`TargetVerifyExecutor.commit_hidden`)."""

from __future__ import annotations

import torch

from contracts.adapters.sglang.draft import build_draft_side, commit_inject, propose
from contracts.adapters.sglang.runtime import CPU, cpu_kernels, runtime
from contracts.boundary.draft import DraftCase, DraftObservation


class SGLangDraft:
    def draft_step(self, case: DraftCase) -> DraftObservation:
        rt = runtime()
        from sglang.srt.managers.overlap_utils import FutureMap

        T, bs = case.gamma + 1, case.bs
        pools = rt.pools(pool_size=bs, kv_slots=sum(case.prefix_lens) + bs * (2 * T + 1) + 1)
        with rt.config(num_draft_tokens=T):
            reqs = [rt.prebuilt_request(pools, f"r{i}", n, tok) for i, (n, tok) in
                    enumerate(zip(case.prefix_lens, case.bonus_tokens))]
            batch = rt.schedule_batch(pools, reqs, enable_overlap=False)
            batch.prepare_for_prebuilt()
            batch.process_prebuilt(FutureMap(CPU, batch.spec_algorithm, pools.req_to_token_pool))
            with cpu_kernels():
                batch.prepare_for_decode()  # reserves the verify window's slots
            side = build_draft_side(gamma=case.gamma, sample_from_anchor=case.sample_from_anchor, dp_moe_sync=False,
                                    enable_num_token_non_padded=False, req_to_token_pool=pools.req_to_token_pool,
                                    allocator=pools.allocator, seed=case.seed)
            proposal, window = propose(side, batch, dp_moe_sync=False, enable_num_token_non_padded=False)
            inject = commit_inject(side, batch, window, torch.tensor(case.commit_lens, dtype=torch.int32), pools)
        fb = side.runner.batches[-1]
        q = side.proposer.query_token_num
        r2t = pools.req_to_token_pool.req_to_token
        rows = batch.req_pool_indices.tolist()
        per = lambda t, w: tuple(tuple(int(x) for x in row) for row in t.reshape(bs, w).tolist())  # noqa: E731
        loc = inject["swa_loc"].reshape(bs, T)
        return DraftObservation(
            query_width=q, mask_token_id=int(side.proposer._mask_token_id),
            input_ids=per(fb.input_ids, q), positions=per(fb.positions, q), cache_locs=per(fb.out_cache_loc, q),
            row_slots=tuple(tuple(int(x) for x in r2t[r, n: n + T].tolist()) for r, n in zip(rows, case.prefix_lens)),
            draft_tokens=per(proposal.draft_block.draft_tokens, case.gamma),
            inject_written=tuple(tuple(bool(x >= 0) for x in row) for row in loc.tolist()),
            inject_positions=per(inject["positions"], T), inject_rows=per(inject["main_hidden"][:, 0].to(torch.int64), T))

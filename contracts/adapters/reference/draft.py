from __future__ import annotations

import torch

from contracts.boundary.draft import DraftCase, DraftObservation, OracleDraftObservation, markov_shapes
from dspark import disaggregation, dspark_draft, mem_cache, sampling, toy_models, verify
from dspark.engine import DSparkEngine, request_key
from dspark.overlap_utils import FutureMap
from dspark.schedule_batch import Req, ReqToTokenPool, ScheduleBatch

VOCAB = 64


class ReferenceDraft:
    def draft_step(self, case: DraftCase) -> DraftObservation:
        T, bs = case.gamma + 1, case.bs
        width = max(case.prefix_lens) + 2 * T + 1
        pool = ReqToTokenPool(bs + 1, width)
        alloc = mem_cache.TokenToKVPoolAllocator(bs * width + 1)
        rows = list(range(1, bs + 1))
        mem_cache.extend_rows(pool.req_to_token, rows, [0] * bs, list(case.prefix_lens), alloc)  # the handoff's KV
        reqs = [Req(rid=i, origin_input_ids=[0] * n, output_ids=[tok], req_pool_idx=r, kv_committed_len=n, kv_allocated_len=n)
                for i, (r, n, tok) in enumerate(zip(rows, case.prefix_lens, case.bonus_tokens))]
        batch = ScheduleBatch.prebuilt(reqs, pool, speculative_num_draft_tokens=T, token_to_kv_pool_allocator=alloc)
        disaggregation.process_prebuilt(batch, FutureMap(pool.size))
        batch.prepare_for_decode()  # reserves the verify window's slots
        proposer = dspark_draft.DraftBlockProposer(case.gamma, mask_token_id=VOCAB - 1,
                                                   sample_from_anchor=case.sample_from_anchor)
        window = dspark_draft.alloc_verify_window(batch, T)
        fb = dspark_draft.with_verify_window(proposer.new_draft_forward_batch(batch), window, proposer.query_token_num)
        target = toy_models.ToyTarget(VOCAB, seed=case.seed)
        drafter = toy_models.make_drafter("vanilla", target, seed=case.seed + 1)
        ctx = [[0] * n for n in case.prefix_lens]
        hiddens = [torch.zeros(n, target.hidden_size, dtype=torch.float64) for n in case.prefix_lens]
        gumbel = torch.zeros(bs, case.gamma, VOCAB, dtype=torch.float64)
        proposal = proposer.propose(drafter, ctx, hiddens, batch.spec_info.bonus_tokens, torch.zeros(bs, dtype=torch.float64),
                                    gumbel)
        inject = dspark_draft.commit_inject_layout(window, torch.tensor(case.commit_lens, dtype=torch.int64))
        q = proposer.query_token_num
        per = lambda t, w: tuple(tuple(int(x) for x in row) for row in t.reshape(bs, w).tolist())  # noqa: E731
        return DraftObservation(
            query_width=q, mask_token_id=proposer.mask_token_id, input_ids=per(fb.input_ids, q),
            positions=per(fb.positions, q), cache_locs=per(fb.out_cache_loc, q), row_slots=per(window.cache_loc_2d, T),
            draft_tokens=per(proposal.draft_tokens, case.gamma),
            inject_written=tuple(tuple(bool(x >= 0) for x in row) for row in inject.loc_2d.tolist()),
            inject_positions=per(inject.positions_2d, T), inject_rows=per(inject.rows_2d, T))

    def oracle_draft_verify(self, case: DraftCase) -> OracleDraftObservation:
        """The toy target's own drafter (`OracleDrafter`) drafts greedily; the target verifies the block."""
        bs = case.bs
        target = toy_models.ToyTarget(VOCAB, seed=case.seed)
        proposer = dspark_draft.DraftBlockProposer(case.gamma, mask_token_id=VOCAB - 1,
                                                   sample_from_anchor=case.sample_from_anchor)
        ctx = [[(7 * b + i) % VOCAB for i in range(n)] for b, n in enumerate(case.prefix_lens)]
        hiddens = [torch.zeros(n, target.hidden_size, dtype=torch.float64) for n in case.prefix_lens]
        anchors = torch.tensor(case.bonus_tokens, dtype=torch.int64)
        proposal = proposer.propose(toy_models.make_drafter("oracle", target), ctx, hiddens, anchors,
                                    torch.zeros(bs, dtype=torch.float64), torch.zeros(bs, case.gamma, VOCAB, dtype=torch.float64))
        cand = torch.cat([anchors[:, None], proposal.draft_tokens], 1)
        prev2 = torch.tensor([c[-1] for c in ctx], dtype=torch.int64)
        logits, _ = target.forward_pairs(prev2, cand)
        acc = verify.greedy_accept(cand, logits)
        fin = verify.finalize(torch.tensor(case.prefix_lens, dtype=torch.int64), proposal.draft_tokens, acc)
        per = lambda t: tuple(tuple(int(x) for x in row) for row in t.tolist())  # noqa: E731
        return OracleDraftObservation(per(proposal.draft_tokens), per(torch.argmax(logits, -1)),
                                      tuple(acc.correct_len.tolist()), tuple(fin.commit_len.tolist()))

    def markov_draft(self, base_logits, bias, anchors, temperatures, seeds, positions):
        """The toy drafter's own sequential sampling (`ToyDrafter.sample_block`) with a vanilla Markov head whose
        embedding is the identity and whose bias table is the caller's; the base logits stand in for the block
        forward. Row r's Gumbel noise comes from the (seeds[r], r, positions[r]) stream, as the engine keys its draws.
        Returns the drafts and the logits they were drawn from (the engine's `step_logits`, what its verify reads)."""
        bs, n, vocab = markov_shapes(base_logits, bias)
        drafter = toy_models.ToyDrafter(toy_models.ToyTarget(vocab), markov_head="vanilla")
        drafter.W1, drafter.W2 = torch.eye(vocab, dtype=torch.float64), bias.to(torch.float64)
        keys = [request_key(int(s), r, int(p)) for r, (s, p) in enumerate(zip(seeds.tolist(), positions.tolist()))]
        gumbel = -torch.log(DSparkEngine._exponential(sampling.counter_uniforms(keys, n * vocab))).reshape(bs, n, vocab)
        hidden = torch.zeros(bs, n, drafter.hidden_size, dtype=torch.float64)
        tokens, logits, _ = drafter.sample_block(base_logits.to(torch.float64), hidden, anchors.to(torch.int64),
                                                 temperatures.to(torch.float64), gumbel)
        return tokens, logits

"""The draft level on vLLM 0.33.0 (DRAFT-001, DRAFT-002): where DSpark's draft forward reads and writes, as the
DFlash speculator DSparkSpeculator inherits prepares it. `propose` calls `prepare_dflash_inputs`
(`_prepare_dflash_inputs_kernel`, Triton, interpreted here) once per step, after the target's verify: it writes the
context rows (the verified target tokens whose features enter the draft KV, rejected ones padded out) and the next
block's query rows ([bonus, mask, ...] at the positions after the last valid one, with their KV slots from the
request's block table), and the sample layout the Markov sampler reads.

For a case's request with committed length n, verify window n .. n+T-1 and commit_len c, two calls:
* the draft forward of the window: the target batch before it is the request's prefill (positions 0 .. n-1, one
  token sampled, the bonus); its query rows are the observation's input ids, positions and KV slots, and the drafts
  are what `DSparkSpeculator._sample_sequential` draws greedily on the sample layout the kernel wrote;
* the commit of that window's verify: the target batch is the window (T tokens), `num_rejected` = T - c; its
  context rows are the observation's inject columns (written = a slot that is not PAD_SLOT_ID).
The request's row (`row_slots`) is the target's own slot mapping of the window (`BlockTables.compute_slot_mappings`).

Substituted, each with what it can hide:
* the InputBatch: a namespace of the five fields `prepare_dflash_inputs` reads (hides `prepare_inputs`' layout);
* the block tables: vLLM's `BlockTables` (staged writes, `gather_block_tables`) filled with distinct random block
  ids, never the null block 0 (hides the KV cache manager's allocation and sliding-window eviction);
* the speculator: `DSparkSpeculator.__new__` with the attributes `_sample_sequential` reads (hides the
  constructor: `num_query_per_req` is the pack's, gamma with the anchor row sampling, else gamma + 1, so DRAFT-001's
  width check does not test it; `parallel_drafting_token_id` is the pack's mask id); greedy drafting
  (`draft_logits` None) with a weights-free draft head (each query row's hidden is a one-hot) and no backbone;
* the commit of target features is where the kernel puts the context rows: the draft KV write itself
  (`_precompute_context_kv`) does not run.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from contracts.boundary.draft import DraftCase, DraftObservation

VOCAB = 64
MASK_ID = VOCAB - 1  # the parallel drafting token id
BLOCK_SIZE = 4  # small pages, so a window crosses page boundaries
MAX_MODEL_LEN = 512  # above every case's n + 2T: the kernel's position clamp is not reached
MAX_TOKENS = 2048


class VLLMDSparkDraftInputs:
    def draft_step(self, case: DraftCase) -> DraftObservation:
        from contracts.adapters.vllm_dspark import env

        env.prepare_vllm_dspark_import()
        from vllm.v1.attention.backends.utils import PAD_SLOT_ID
        from vllm.v1.worker.gpu.block_table import BlockTables

        bs, gamma, T = case.bs, case.gamma, case.gamma + 1
        q = gamma if case.sample_from_anchor else gamma + 1
        if max(case.prefix_lens) + 2 * T > MAX_MODEL_LEN:
            raise ValueError(f"prefix_lens: at most {MAX_MODEL_LEN - 2 * T} here, got {max(case.prefix_lens)}")
        states = torch.arange(bs, 0, -1, dtype=torch.int32)  # request state slot bs - r for row r: not the identity
        max_blocks = MAX_MODEL_LEN // BLOCK_SIZE
        tables = BlockTables([BLOCK_SIZE], max_num_reqs=bs + 1, max_num_batched_tokens=MAX_TOKENS,
                             max_num_blocks_per_group=[max_blocks], device=torch.device("cpu"))
        blocks = torch.randperm(bs * max_blocks, generator=torch.Generator().manual_seed(case.seed)) + 1
        for r in range(bs):
            tables.append_block_ids(int(states[r]), (blocks[r * max_blocks:(r + 1) * max_blocks].tolist(),),
                                    overwrite=True)
        tables.apply_staged_writes()
        block_table = tables.gather_block_tables(states, bs)[0]
        windows = [list(range(n, n + T)) for n in case.prefix_lens]
        row_slots = tables.compute_slot_mappings(states, _starts([T] * bs), torch.tensor(sum(windows, [])),
                                                 bs * T)[0][: bs * T].view(bs, T)

        draft = _prepare(case, states, block_table, q, [list(range(n)) for n in case.prefix_lens], [1] * bs, [0] * bs,
                         case.bonus_tokens)
        commit = _prepare(case, states, block_table, q, windows, list(case.commit_lens),
                          [T - c for c in case.commit_lens], [0] * bs)
        drafts = _greedy_drafts(draft, gamma, q, bs)
        per = lambda t, w: tuple(tuple(int(x) for x in row) for row in t[: bs * w].reshape(bs, w).tolist())  # noqa: E731
        ctx_slots = commit.context_slots[: bs * T].reshape(bs, T)
        return DraftObservation(
            query_width=q, mask_token_id=MASK_ID, input_ids=per(draft.buffers.input_ids, q),
            positions=per(draft.buffers.positions, q), cache_locs=per(draft.query_slots, q),
            row_slots=per(row_slots, T), draft_tokens=per(drafts, gamma),
            inject_written=tuple(tuple(bool(s != PAD_SLOT_ID) for s in row) for row in ctx_slots.tolist()),
            inject_positions=per(commit.context_positions, T),
            inject_rows=tuple(tuple(b * T + col for col in range(T)) for b in range(bs)))  # the kernel's row layout


def _starts(lens) -> torch.Tensor:
    return torch.tensor([0, *np.cumsum(lens)], dtype=torch.int32)


def _prepare(case, states, block_table, q, positions, num_sampled, num_rejected, last_sampled):
    """One `prepare_dflash_inputs` call after a target batch whose requests held `positions`."""
    from vllm.v1.worker.gpu.input_batch import InputBuffers
    from vllm.v1.worker.gpu.spec_decode.dflash.speculator import prepare_dflash_inputs

    bs, gamma, max_reqs = case.bs, case.gamma, case.bs + 1
    lens = [len(p) for p in positions]
    batch = SimpleNamespace(num_reqs=bs, num_scheduled_tokens=np.array(lens, dtype=np.int32),
                            positions=torch.tensor(sum(positions, []), dtype=torch.int64), query_start_loc=_starts(lens),
                            idx_mapping=states)
    out = SimpleNamespace(buffers=InputBuffers(max_reqs, MAX_TOKENS, torch.device("cpu")),
                          query_slots=torch.zeros(MAX_TOKENS, dtype=torch.int64),
                          context_positions=torch.zeros(MAX_TOKENS, dtype=torch.int64),
                          context_slots=torch.zeros(MAX_TOKENS, dtype=torch.int64),
                          sample_indices=torch.zeros(max_reqs * gamma, dtype=torch.int64),
                          sample_pos=torch.zeros(max_reqs * gamma, dtype=torch.int64),
                          sample_idx_mapping=torch.zeros(max_reqs * gamma, dtype=torch.int32))
    last = torch.zeros(max_reqs, dtype=torch.int64)
    last[states.long()] = torch.tensor(last_sampled, dtype=torch.int64)
    zeros = torch.zeros(max_reqs, dtype=torch.int64)
    prepare_dflash_inputs(
        out.buffers, out.query_slots, out.context_positions, out.context_slots, out.sample_indices, out.sample_pos,
        out.sample_idx_mapping, torch.zeros(max_reqs), zeros.clone(), batch,
        torch.tensor(num_sampled, dtype=torch.int32), torch.tensor(num_rejected, dtype=torch.int32), last, zeros,
        torch.zeros(max_reqs), zeros, block_table, BLOCK_SIZE, 0, 1, 1, MASK_ID, q, gamma, max_reqs, MAX_TOKENS,
        MAX_MODEL_LEN, case.sample_from_anchor, bs)
    return out


def _greedy_drafts(prepared, gamma: int, q: int, bs: int) -> torch.Tensor:
    """`DSparkSpeculator._sample_sequential` on the sample layout the kernel wrote, drafting greedily (no draft logits
    kept); query row j's hidden is a one-hot of j mod (VOCAB - 1), the draft head returns it as logits."""
    from vllm.v1.worker.gpu.spec_decode.dspark.speculator import DSparkSpeculator

    from contracts.adapters.vllm_dspark.draft import _WeightsFreeDSparkModel

    max_reqs = bs + 1
    spec = DSparkSpeculator.__new__(DSparkSpeculator)
    spec.__dict__.update(
        _draft_topk=None, model=_WeightsFreeDSparkModel(torch.zeros(VOCAB, VOCAB)), num_speculative_steps=gamma,
        sample_indices=prepared.sample_indices, sample_idx_mapping=prepared.sample_idx_mapping,
        sample_pos=prepared.sample_pos, input_buffers=prepared.buffers,
        _anchor_idx=torch.arange(max_reqs, dtype=torch.int64) * q, use_confidence_head=False,
        acceptance_estimator=None, draft_logits=None, _step_cols=torch.arange(gamma, dtype=torch.int32),
        draft_tokens=torch.full((max_reqs, gamma), -1, dtype=torch.int64))
    rows = bs * q
    hidden = torch.nn.functional.one_hot(torch.arange(rows) % (VOCAB - 1), VOCAB).to(torch.float32)
    spec._sample_sequential(bs, hidden)
    return spec.draft_tokens[:bs]

from __future__ import annotations

from contracts.boundary.kv import KvCase, KvRequestStep, KvStep
from dspark import disaggregation, mem_cache
from dspark.engine import admission_limit
from dspark.overlap_utils import FutureMap
from dspark.schedule_batch import Req, ReqToTokenPool, ScheduleBatch


class _CountingReq(Req):
    """A Req that counts writes of its allocated length (observation only: the value is stored as written)."""

    def __setattr__(self, name, value):
        if name == "kv_allocated_len":
            object.__setattr__(self, "allocated_writes", getattr(self, "allocated_writes", 0) + 1)
        object.__setattr__(self, name, value)


def _other_rows(pool, rows):
    keep = [r for r in range(1, pool.req_to_token.shape[0]) if r not in set(rows)]  # row 0 is the padding row
    return pool.req_to_token[keep].clone()


class ReferenceKv:
    def kv_admission_limit(self, context_len, num_draft_tokens, page_size):
        return admission_limit(context_len, num_draft_tokens, page_size)

    def kv_prompt_limit(self, context_len):
        return context_len - 1  # the reference admits any prompt that leaves room for one new token

    def kv_page_sizes(self):
        return (1, 2, 4, 16, 64)

    def run_kv_steps(self, case: KvCase):
        T, page, n = case.num_draft_tokens, case.page_size, len(case.requests)
        pool = ReqToTokenPool(n + 2, case.context_len, page_size=page)
        alloc = mem_cache.TokenToKVPoolAllocator(n * (case.context_len + page) + page, page_size=page)
        rows = list(range(1, n + 1))  # row 0: the padding row
        mem_cache.extend_rows(pool.req_to_token, rows, [0] * n, [r.prompt_len for r in case.requests], alloc)  # the handoff's KV
        reqs = []
        for i, (row, r) in enumerate(zip(rows, case.requests)):
            req = _CountingReq(rid=i, origin_input_ids=[0] * r.prompt_len, output_ids=[1], req_pool_idx=row,
                               kv_committed_len=r.prompt_len, kv_allocated_len=r.prompt_len)
            reqs.append(req)
        batch = ScheduleBatch.prebuilt(reqs, pool, speculative_num_draft_tokens=T, token_to_kv_pool_allocator=alloc)
        disaggregation.process_prebuilt(batch, FutureMap(pool.size))
        asks, real_extend = [], mem_cache.extend_rows

        def recording_extend(req_to_token, rows_, cur, nxt, allocator):
            asks.append(list(zip(cur, nxt)))
            return real_extend(req_to_token, rows_, cur, nxt, allocator)

        out = []
        mem_cache.extend_rows = recording_extend
        try:
            for commits in case.commits:
                before = [r.kv_allocated_len for r in reqs]
                for r in reqs:
                    object.__setattr__(r, "allocated_writes", 0)
                others, free = _other_rows(pool, rows), alloc.available_size()
                try:
                    batch.prepare_for_decode()
                except Exception as e:  # reported; nothing after it is observed
                    out.append(KvStep((), (), 0, False, f"{type(e).__name__}: {e}"))
                    break
                out.append(KvStep(
                    tuple(KvRequestStep(r.kv_committed_len, b, r.kv_allocated_len, r.allocated_writes, pool.req_to_token.shape[1],
                                        tuple(pool.req_to_token[r.req_pool_idx, : r.kv_allocated_len].tolist()))
                          for r, b in zip(reqs, before)),
                    tuple(asks[-1]) if asks else tuple((b, b) for b in before), free - alloc.available_size(),
                    not bool((_other_rows(pool, rows) == others).all())))
                asks.clear()
                for r, c in zip(reqs, commits):  # the scheduler commits the verified tokens
                    r.kv_committed_len += c
                    r.output_ids.extend([1] * c)
        finally:
            mem_cache.extend_rows = real_extend
        return tuple(out)

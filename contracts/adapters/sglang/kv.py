"""KV level on SGLang: the decode step's reservation (`ScheduleBatch.prepare_for_decode` -> the DFlash draft input's
`prepare_for_decode` -> `alloc_for_spec_decode`) with SGLang's real pools, allocators and row sizing.

Between steps the adapter commits each request's accepted tokens as the result processor does
(`kv_committed_len += commit_len`, the tokens appended to `output_ids`); the verify that would produce them is
the verify level's subject.
"""

from __future__ import annotations

from contracts.adapters.patching import patched
from contracts.adapters.sglang.runtime import CPU, cpu_kernels, runtime
from contracts.boundary.kv import KvCase, KvRequestStep, KvStep

WRITES: dict = {}  # id(ReqKvInfo) -> writes of kv_allocated_len since the last reset


def _counting(kv):
    """Swap a ReqKvInfo's class for a same-layout subclass that counts writes of kv_allocated_len (the value is
    stored as written; ReqKvInfo has slots, so the count lives in WRITES)."""
    base = type(kv)

    class CountingKv(base):
        __slots__ = ()

        def __setattr__(self, name, value):
            if name == "kv_allocated_len":
                WRITES[id(self)] = WRITES.get(id(self), 0) + 1
            base.__setattr__(self, name, value)

    kv.__class__ = CountingKv
    return kv


class SGLangKv:
    def kv_admission_limit(self, context_len, num_draft_tokens, page_size):
        # What the scheduler admits: max_new_tokens <= max_req_len - input_len - 1 (scheduler.py), with
        # max_req_len = context_len - 1 (tp_worker.py); the reserve is not part of SGLang's admission.
        return context_len - 2

    def kv_page_sizes(self):
        return (1, 2, 4, 16, 64)

    def run_kv_steps(self, case: KvCase):
        rt = runtime()
        from sglang.srt.managers.overlap_utils import FutureMap
        from sglang.srt.speculative import dflash_info_v2

        T, n = case.num_draft_tokens, len(case.requests)
        out = []
        with rt.config(num_draft_tokens=T, page_size=case.page_size):
            pools = rt.pools(pool_size=n + 1, kv_slots=n * (case.context_len + 3 * T + case.page_size) + case.page_size,
                             page_size=case.page_size, context_len=case.context_len)
            reqs = [rt.prebuilt_request(pools, f"r{i}", r.prompt_len, 1, max_new_tokens=r.max_new_tokens)
                    for i, r in enumerate(case.requests)]
            batch = rt.schedule_batch(pools, reqs, enable_overlap=False)
            batch.prepare_for_prebuilt()
            batch.process_prebuilt(FutureMap(CPU, batch.spec_algorithm, pools.req_to_token_pool))
            for r in reqs:
                _counting(r.kv)
            r2t = pools.req_to_token_pool.req_to_token
            rows = [r.kv.req_pool_idx for r in reqs]
            others = [i for i in range(1, r2t.shape[0]) if i not in set(rows)]  # row 0 is the padding row
            asks, real = [], dflash_info_v2.alloc_for_spec_decode

            def recording(tree_cache, req_to_token_pool, **kw):  # what the step asks for; SGLang's allocation still runs
                asks.append(list(zip(kw["cur_kv_lens_cpu"].tolist(), kw["nxt_kv_lens_cpu"].tolist())))
                return real(tree_cache, req_to_token_pool, **kw)

            with patched(dflash_info_v2, "alloc_for_spec_decode", recording):
                for commits in case.commits:
                    before = [r.kv.kv_allocated_len for r in reqs]
                    for r in reqs:
                        WRITES[id(r.kv)] = 0
                    untouched, free = r2t[others].clone(), pools.allocator.available_size()
                    asks.clear()
                    try:
                        with cpu_kernels():
                            batch.prepare_for_decode()
                    except Exception as e:  # reported; nothing after it is observed
                        out.append(KvStep((), (), 0, False, f"{type(e).__name__}: {e}"))
                        break
                    width = r2t.shape[1]
                    out.append(KvStep(
                        tuple(KvRequestStep(r.kv.kv_committed_len, b, r.kv.kv_allocated_len, WRITES[id(r.kv)], width,
                                            tuple(r2t[r.kv.req_pool_idx, : min(r.kv.kv_allocated_len, width)].tolist()))
                              for r, b in zip(reqs, before)),
                        tuple(asks[-1]) if asks else tuple((b, b) for b in before),
                        free - pools.allocator.available_size(), not bool((r2t[others] == untouched).all())))
                    for r, c in zip(reqs, commits):  # the result processor's commit of the verified tokens
                        r.kv.kv_committed_len += c
                        r.output_ids.extend([1] * c)
        return tuple(out)

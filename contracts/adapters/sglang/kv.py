"""KV level on SGLang: the decode step's reservation (`ScheduleBatch.prepare_for_decode` -> the DFlash draft input's
`prepare_for_decode` -> `alloc_for_spec_decode`) with SGLang's real pools, allocators and row sizing.

Between steps the adapter commits each request's accepted tokens as the result processor does
(`kv_committed_len += commit_len`, the tokens appended to `output_ids`); the verify that would produce them is
the verify level's subject.
"""

from __future__ import annotations

from array import array
from functools import lru_cache
from types import SimpleNamespace

from contracts.adapters.sglang.runtime import CPU, cpu_kernels, runtime
from contracts.boundary.kv import KvCase, KvRequestStep, KvStep
from contracts.patching import patched

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


@lru_cache(maxsize=None)
def _admission(context_len: int) -> "_Admission":
    return _Admission(context_len)


class _Admission:
    """SGLang's request admission at one context length, computed by SGLang's own code: the worker's limits
    (TpModelWorker.get_worker_info: max_req_len, max_req_input_len), the prompt check (validate_input_length) and the
    grant of new tokens (Scheduler.init_req_max_new_tokens). Their `self` objects are stand-ins holding only what
    those functions read, with a KV pool far larger than the context (only the context length limits a request);
    hides: a limit that comes from the pool's size rather than the context."""

    BIG = 1 << 20

    def __init__(self, context_len: int):
        runtime()
        from sglang.srt.managers.tp_worker import TpModelWorker

        runner = SimpleNamespace(effective_logical_max_total_num_tokens=self.BIG, logical_max_total_num_tokens=self.BIG,
                                 token_to_kv_pool_allocator=None, max_running_requests=8, forward_stream=None,
                                 req_to_token_pool=SimpleNamespace(size=8, max_context_len=0),
                                 token_to_kv_pool=SimpleNamespace(size=self.BIG))
        worker = SimpleNamespace(model_runner=runner, model_config=SimpleNamespace(context_len=context_len),
                                 dllm_algorithm=None, random_seed=0, device="cpu")
        info = TpModelWorker.get_worker_info(worker)
        self.max_req_len, self.max_req_input_len = info[4], info[5]

    def _request(self, prompt_len: int, max_new_tokens: int):
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.managers.scheduler import Scheduler
        from sglang.srt.mem_cache.allocator.base import BaseTokenToKVPoolAllocator
        from sglang.srt.sampling.sampling_params import SamplingParams

        params = SamplingParams(max_new_tokens=max_new_tokens, top_k=1, temperature=0.0)
        params.normalize(None)
        req = Req("probe", "", array("q", [1] * prompt_len), params, vocab_size=32)
        page = SimpleNamespace(page_size=1)
        allocator = SimpleNamespace(page_size=1, max_new_tokens_for_memory=lambda *a, **k:
                                    BaseTokenToKVPoolAllocator.max_new_tokens_for_memory(page, *a, **k))
        sched = SimpleNamespace(max_new_tokens_limit=None, max_req_len=self.max_req_len, max_total_num_tokens=self.BIG,
                                kv_shard_widening=1, page_size=1, token_to_kv_pool_allocator=allocator,
                                sliding_window_size=None, chunked_prefill_size=None)
        Scheduler.init_req_max_new_tokens(sched, req)
        return req

    def admits(self, prompt_len: int) -> bool:
        from sglang.srt.managers.utils import validate_input_length

        return validate_input_length(self._request(prompt_len, 1), self.max_req_input_len, False) is None

    def longest_prompt(self) -> int:
        n = self.max_req_input_len + 1  # validate_input_length decides; start just past the limit it is given
        while n > 1 and not self.admits(n):
            n -= 1
        return n

    def granted(self, prompt_len: int) -> int:
        """The max_new_tokens the scheduler grants a prompt that asks for more than any context holds."""
        return self._request(prompt_len, self.BIG).sampling_params.max_new_tokens


class SGLangKv:
    def kv_admission_limit(self, context_len, num_draft_tokens, page_size):
        # The longest prompt + max_new_tokens: a one-token prompt's max_new_tokens as the scheduler grants it
        # (Scheduler.init_req_max_new_tokens), plus the prompt; the decode reserve is not part of SGLang's admission.
        return 1 + _admission(context_len).granted(1)

    def kv_prompt_limit(self, context_len):
        # The longest prompt validate_input_length lets through (it refuses len >= max_req_input_len).
        return _admission(context_len).longest_prompt()

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

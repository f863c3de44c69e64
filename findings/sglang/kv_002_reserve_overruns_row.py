"""KV-002 (SGLang 0.5.23): the DFlash-family decode reservation overruns the request-to-token row at page size 1.

DFlashDraftInputV2.prepare_for_decode reserves kv_committed_len + 2 * speculative_num_draft_tokens (T) columns of a
request's req_to_token row; get_req_to_token_extra_context_len widens the row for that reserve only when
page_size > 1 or the algorithm is UNO, so at page size 1 the row is context_len + 4 + T. A request still decoding
reaches kv_committed_len = context_len - 4, so for T >= 9 the reservation runs past the row, and the assign kernel
(no column bound) writes the last slots into the NEXT request's row.

Admissible case (checked here with SGLang's own admission code): context_len 48, T 9 (gamma 8), page size 1; prompt 41
(max_req_input_len = 42), max_new_tokens 5 (clipped to max_req_len - 41 - 1 = 5); three decode steps committing one
token each; the fourth reservation asks for 62 columns of a 61-wide row.

    python findings/sglang/kv_002_reserve_overruns_row.py             # exits 1 on sglang 0.5.23
    python findings/sglang/kv_002_reserve_overruns_row.py --with-fix  # in-process fix, exits 0

Imports only the standard library, torch and sglang (plus _cpu_setup.py next to this file).
"""

import argparse
import os
import sys
from array import array
from types import SimpleNamespace

sys.dont_write_bytecode = True  # no __pycache__ next to the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _cpu_setup  # noqa: E402

FINDING = "KV-002"
CONTEXT_LEN, T, PAGE = 48, 9, 1  # T = speculative_num_draft_tokens = gamma + 1 (DFLASH block size)
PROMPT, MAX_NEW = 41, 5
COMMITS = (1, 1, 1)  # tokens the verify commits after each of the first three reservations


def apply_fix():
    """Minimal correction: widen the row for the decode reserve for the DFlash family too (as for UNO)."""
    from sglang.srt.mem_cache import allocation_sizing as az
    from sglang.srt.runtime_context import get_spec
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    real = az.get_req_to_token_extra_context_len

    def get_req_to_token_extra_context_len():
        extra = real()
        algo = get_spec().speculative_algorithm
        if algo is not None and SpeculativeAlgorithm.from_string(algo).is_dflash_family():
            extra = max(extra, az.get_alloc_reserve_per_decode() + az.get_alloc_page_size() - 1)
        return extra

    az.get_req_to_token_extra_context_len = get_req_to_token_extra_context_len


def admission(model_config):
    """The limits SGLang's scheduler applies, computed by its own functions (TpModelWorker.get_worker_info,
    validate_input_length, Scheduler.init_req_max_new_tokens) on stand-in `self` objects."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.managers.tp_worker import TpModelWorker
    from sglang.srt.managers.utils import validate_input_length
    from sglang.srt.mem_cache.allocator.base import BaseTokenToKVPoolAllocator
    from sglang.srt.sampling.sampling_params import SamplingParams

    big = 1 << 20  # a KV pool far larger than the context: only context_len limits the request
    runner = SimpleNamespace(effective_logical_max_total_num_tokens=big, logical_max_total_num_tokens=big,
                             token_to_kv_pool_allocator=None, max_running_requests=8, forward_stream=None,
                             req_to_token_pool=SimpleNamespace(size=8, max_context_len=0),
                             token_to_kv_pool=SimpleNamespace(size=big))
    worker = SimpleNamespace(model_runner=runner, model_config=SimpleNamespace(context_len=CONTEXT_LEN),
                             dllm_algorithm=None, random_seed=0, device="cpu")
    info = TpModelWorker.get_worker_info(worker)
    max_req_len, max_req_input_len = info[4], info[5]

    def request(prompt_len, max_new_tokens):
        params = SamplingParams(max_new_tokens=max_new_tokens, top_k=1, temperature=0.0)
        params.normalize(None)
        req = Req("probe", "", array("q", [1] * prompt_len), params, vocab_size=model_config.vocab_size)
        allocator = SimpleNamespace(page_size=PAGE, max_new_tokens_for_memory=lambda *a, **k:
                                    BaseTokenToKVPoolAllocator.max_new_tokens_for_memory(
                                        SimpleNamespace(page_size=PAGE), *a, **k))
        sched = SimpleNamespace(max_new_tokens_limit=None, max_req_len=max_req_len, max_total_num_tokens=big,
                                kv_shard_widening=1, page_size=PAGE, token_to_kv_pool_allocator=allocator,
                                sliding_window_size=None, chunked_prefill_size=None)
        Scheduler.init_req_max_new_tokens(sched, req)
        return validate_input_length(req, max_req_input_len, False), req.sampling_params.max_new_tokens

    refused_42, _ = request(PROMPT + 1, MAX_NEW)
    refused_41, max_new = request(PROMPT, 1000)
    return max_req_len, max_req_input_len, refused_42, refused_41, max_new


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--with-fix", action="store_true", help="apply the minimal correction in-process first")
    args = ap.parse_args()
    _cpu_setup.require_version(FINDING)
    _cpu_setup.publish(speculative_algorithm="DFLASH", speculative_num_draft_tokens=T, page_size=PAGE,
                       context_length=CONTEXT_LEN, attention_backend="torch_native")

    import atexit
    import json
    import shutil
    import tempfile

    import torch
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.disaggregation.decode import alloc_for_decode_prealloc
    from sglang.srt.managers.overlap_utils import FutureMap
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.mem_cache import allocation_sizing
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    if args.with_fix:
        apply_fix()

    d = tempfile.mkdtemp(prefix="kv002-")
    atexit.register(shutil.rmtree, d, True)
    with open(os.path.join(d, "config.json"), "w") as f:  # a one-layer config: ModelConfig reads no weights
        json.dump(dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=1024, hidden_size=64,
                       intermediate_size=128, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                       max_position_embeddings=CONTEXT_LEN), f)
    model_config = ModelConfig(d, context_length=CONTEXT_LEN)

    max_req_len, max_req_input_len, refused_42, refused_41, max_new = admission(model_config)
    print(f"admission (SGLang's own code): context_len {CONTEXT_LEN}, max_req_len {max_req_len}, "
          f"max_req_input_len {max_req_input_len}; prompt {PROMPT + 1} refused: {refused_42 is not None}; "
          f"prompt {PROMPT} admitted: {refused_41 is None} with max_new_tokens clipped to {max_new}")
    assert refused_41 is None and max_new == MAX_NEW, "the case is not admissible on this configuration"

    # The pools as ModelRunner sizes them: row width = context_len + get_req_to_token_extra_context_len().
    width = CONTEXT_LEN + allocation_sizing.get_req_to_token_extra_context_len()
    r2t_pool = ReqToTokenPool(size=3, max_context_len=width, device="cpu", enable_memory_saver=False)
    alloc = TokenToKVPoolAllocator(4 * width, dtype=torch.bfloat16, device="cpu", kvcache=None, need_sort=True)
    tree = UnifiedRadixCache(CacheInitParams(disable=True, req_to_token_pool=r2t_pool, token_to_kv_pool_allocator=alloc,
                                             page_size=PAGE, tree_components=(ComponentType.FULL,)))

    def prebuilt(rid, prompt_len):
        """A request after prefill (here: KV handed over to a PD decode server, DecodePreallocQueue's allocation)."""
        params = SamplingParams(max_new_tokens=MAX_NEW, top_k=1, temperature=0.0)
        params.normalize(None)
        req = Req(rid, "", array("q", [1 + i % 1000 for i in range(prompt_len)]), params,
                  vocab_size=model_config.vocab_size)
        req.output_ids.append(7)  # the token the prefill sampled
        r2t_pool.alloc([req])
        fill = len(req.origin_input_ids) + len(req.output_ids) - 1
        req.kv.kv_committed_len = fill
        loc = alloc_for_decode_prealloc(alloc, req=req, fill_len=fill, delta_len=fill, prefix_len=0,
                                        total_prefix_len=0, prefix_indices=None, uses_swa_tail=False, swa_tail_len=0,
                                        req_to_token_pool=r2t_pool)
        r2t_pool.write((req.kv.req_pool_idx, slice(0, len(loc))), loc)
        req.full_untruncated_fill_ids = req.origin_input_ids + req.output_ids
        req.prefix_len, req.extend_end = 0, fill
        return req

    # ReqToTokenPool hands out rows from the top: the neighbour (another running request) takes the last row, so
    # r0's row is followed by the neighbour's and an overrun stays inside the table.
    neighbour = prebuilt("r1", 8)
    req = prebuilt("r0", PROMPT)
    assert neighbour.kv.req_pool_idx == req.kv.req_pool_idx + 1
    batch = ScheduleBatch.init_new([req], r2t_pool, alloc, tree, model_config, enable_overlap=False,
                                   spec_algorithm=SpeculativeAlgorithm.from_string("DFLASH"))
    batch.prepare_for_prebuilt()
    batch.process_prebuilt(FutureMap(torch.device("cpu"), batch.spec_algorithm, r2t_pool))

    r2t = r2t_pool.req_to_token
    neighbour_row = r2t[neighbour.kv.req_pool_idx].clone()
    reserved = []
    for step in range(len(COMMITS) + 1):
        batch.prepare_for_decode()  # ScheduleBatch -> spec_prepare_for_decode -> DFlashDraftInputV2.prepare_for_decode
        reserved.append((req.kv.kv_committed_len, req.kv.kv_allocated_len))
        if step < len(COMMITS):  # the result processor's commit of the verified tokens
            req.kv.kv_committed_len += COMMITS[step]
            req.output_ids.extend([7] * COMMITS[step])
    assert len(req.output_ids) < MAX_NEW, "the request must still be decoding at the last reservation"

    committed, allocated = reserved[-1]
    now = r2t[neighbour.kv.req_pool_idx]
    clobbered = int((now != neighbour_row).sum())
    detail = ""
    if clobbered:
        col = int((now != neighbour_row).nonzero()[0])
        detail = (f" (column {col}, the KV slot of its token {col}: {int(neighbour_row[col])} -> {int(now[col])}, "
                  f"a slot reserved for r0)")
    print(f"steps (committed -> reserved columns): {reserved}; row width {width}")
    print(f"expected: the step reserving columns [.., {allocated}) fits the request's row (width >= {allocated}), "
          f"and no other request's row changes")
    print(f"observed: reserved {allocated} columns of a {width}-wide row at kv_committed_len {committed} "
          f"(still decoding, {len(req.output_ids)}/{MAX_NEW} tokens); the next request's row had {clobbered} "
          f"column(s) overwritten{detail}")
    ok = allocated <= width and clobbered == 0
    print(f"{FINDING}: {'PASS' if ok else 'FAIL'}{' (with fix)' if args.with_fix else ''}")
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # an error is neither "reproduced" (1) nor "fixed" (0)
        import traceback

        traceback.print_exc()
        sys.exit(3)

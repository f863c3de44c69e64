"""SGLang imported once per process, its config published from its own ServerArgs, and its real objects built on CPU.

Everything here is SGLang's own code: `ServerArgs` (through the runtime context's
`override_server_args`), `ModelConfig` (from a one-layer config.json written at
run time: no weights), `ReqToTokenPool`, the token-to-KV allocators, the disabled
radix cache `--disable-radix-cache` builds, `Req`, `SamplingParams` and
`ScheduleBatch.init_new`. The substitutions a CPU host forces are the context
managers at the bottom, each applied only around the call that needs it:

* `assign_req_to_token_pool` (a Triton kernel, run by the interpreter on CPU) gets
  a bounds guard in front: columns past a row are dropped instead of written into
  the next request's row (or past the table, which on a CPU tensor would corrupt
  this process's memory). The allocation lengths SGLang records are untouched, so
  a reservation wider than its row stays visible.
* `speculative cache locations`: SGLang's out-of-tree platform hook
  (`cache_locs._get_oot_speculative_cache_locs_fn`) answers with a torch gather of
  `req_to_token[row, start:start+width]`; without it a plain CPU host gets None.
  Hides: a wrong gather in the CUDA/NPU kernels.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from array import array

import torch

from contracts.adapters.sglang import env as sglang_env
from contracts.patching import patched

CPU = torch.device("cpu")
VOCAB = 151936  # a Qwen-sized vocabulary, so any token id the strategies draw is in range
CONTEXT_LEN = 16384
_RUNTIME = None


@functools.lru_cache(maxsize=None)
def single_rank_tp_sync():
    """SGLang's SpecTpSync over a one-rank group: with world_size 1 it syncs nothing and holds no state, so every
    caller shares one (real groups: the ranks level)."""
    from types import SimpleNamespace

    from sglang.srt.speculative.spec_tp_sync import SpecTpSync

    return SpecTpSync(SimpleNamespace(world_size=1, rank_in_group=0))


def runtime() -> "Runtime":
    global _RUNTIME
    if _RUNTIME is None:
        _RUNTIME = Runtime()
    return _RUNTIME


class Runtime:
    def __init__(self):
        sglang_env.prepare_sglang_import()  # before any sglang import: the torchvision stand-in, Triton's interpreter
        from sglang.srt.configs.model_config import ModelConfig
        from sglang.srt.runtime_context import get_context

        override = get_context().override_server_args(
            speculative_algorithm="DSPARK", speculative_num_draft_tokens=6, page_size=1, device="cpu",
            attention_backend="torch_native")  # torch_native: the paged last-location lookup has a torch path
        override.install()
        self._dir = sglang_env.scratch_dir("dspark-contracts-sglang-")
        with open(os.path.join(self._dir, "config.json"), "w") as f:
            json.dump(dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=VOCAB, hidden_size=64,
                           intermediate_size=128, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                           max_position_embeddings=CONTEXT_LEN), f)
        self.model_config = ModelConfig(self._dir)

    # ---- config ---------------------------------------------------------------

    @contextlib.contextmanager
    def config(self, *, num_draft_tokens: int | None = None, page_size: int | None = None,
               overlap: bool | None = None, max_running_requests: int | None = None, spec: dict | None = None):
        """Scoped overrides of the published config bags (SGLang's own `_ConfigBag.override`)."""
        from sglang.srt.runtime_context import get_schedule, get_spec

        spec_fields = dict(spec or {})
        if num_draft_tokens is not None:
            spec_fields.update(speculative_num_draft_tokens=num_draft_tokens,
                               max_speculative_num_draft_tokens=num_draft_tokens)
        schedule_fields = {}
        if page_size is not None:
            schedule_fields["page_size"] = page_size
        if overlap is not None:
            schedule_fields["disable_overlap_schedule"] = not overlap
        if max_running_requests is not None:
            schedule_fields["max_running_requests"] = max_running_requests
        with contextlib.ExitStack() as stack:
            if spec_fields:
                stack.enter_context(get_spec().override(**spec_fields))
            if schedule_fields:
                stack.enter_context(get_schedule().override(**schedule_fields))
            yield

    # ---- pools and requests -----------------------------------------------------

    def pools(self, *, pool_size: int, kv_slots: int, page_size: int = 1, context_len: int = CONTEXT_LEN) -> "Pools":
        """SGLang's request pool (row width as its own sizing sets it), allocator and disabled radix cache."""
        from sglang.srt.mem_cache.allocation_sizing import get_req_to_token_extra_context_len
        from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
        from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
        from sglang.srt.mem_cache.unified_cache.components import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

        width = context_len + get_req_to_token_extra_context_len()
        r2t = ReqToTokenPool(size=pool_size, max_context_len=width, device="cpu", enable_memory_saver=False)
        kv_slots = -(-max(kv_slots, page_size) // page_size) * page_size
        # need_sort as a PD decode server builds it (kv_cache_configurator: disaggregation mode decode).
        if page_size == 1:
            alloc = TokenToKVPoolAllocator(kv_slots, dtype=torch.bfloat16, device="cpu", kvcache=None, need_sort=True)
        else:
            alloc = PagedTokenToKVPoolAllocator(kv_slots, page_size=page_size, dtype=torch.bfloat16, device="cpu",
                                                kvcache=None, need_sort=True)
        tree = UnifiedRadixCache(CacheInitParams(disable=True, req_to_token_pool=r2t, token_to_kv_pool_allocator=alloc,
                                                 page_size=page_size, tree_components=(ComponentType.FULL,)))
        return Pools(r2t, alloc, tree, context_len)

    def prebuilt_request(self, pools: "Pools", rid: str, prompt_len: int, outputs, *,
                         max_new_tokens: int = 64, top_k: int = 1, temperature: float = 0.0):
        """A decode-side request whose KV arrived from a prefill server: pool row and KV slots taken as
        SGLang's DecodePreallocQueue takes them (`alloc_for_decode_prealloc`), its sampled tokens appended
        (`outputs`: the first token, or the list of them, the pending one last)."""
        from sglang.srt.disaggregation.decode import alloc_for_decode_prealloc
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        params = SamplingParams(max_new_tokens=max_new_tokens, top_k=top_k, temperature=temperature)
        params.normalize(None)
        params.verify(self.model_config.vocab_size)
        req = Req(rid, "", array("q", [1 + (i % 1000) for i in range(prompt_len)]), params,
                  vocab_size=self.model_config.vocab_size)
        req.output_ids.extend(int(t) for t in ([outputs] if isinstance(outputs, int) else outputs))
        if pools.req_to_token_pool.alloc([req]) is None:
            raise ValueError("pool_size: no free request row for the handoff")
        fill = len(req.origin_input_ids) + len(req.output_ids) - 1
        req.kv.kv_committed_len = fill
        loc = alloc_for_decode_prealloc(pools.allocator, req=req, fill_len=fill, delta_len=fill, prefix_len=0,
                                        total_prefix_len=0, prefix_indices=None, uses_swa_tail=False, swa_tail_len=0,
                                        req_to_token_pool=pools.req_to_token_pool)
        if loc is None:
            raise ValueError("kv_slots: the allocator has no room for the handed-over KV")
        pools.req_to_token_pool.write((req.kv.req_pool_idx, slice(0, len(loc))), loc)
        req.full_untruncated_fill_ids = req.origin_input_ids + req.output_ids
        req.prefix_len, req.extend_end = 0, fill
        return req

    def schedule_batch(self, pools: "Pools", reqs, *, enable_overlap: bool, algorithm: str = "DSPARK"):
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        return ScheduleBatch.init_new(list(reqs), pools.req_to_token_pool, pools.allocator, pools.tree_cache,
                                      self.model_config, enable_overlap=enable_overlap,
                                      spec_algorithm=SpeculativeAlgorithm.from_string(algorithm))


class Pools:
    def __init__(self, req_to_token_pool, allocator, tree_cache, context_len):
        self.req_to_token_pool, self.allocator, self.tree_cache = req_to_token_pool, allocator, tree_cache
        self.context_len = context_len


# ---- the substitutions a CPU host forces (see the module docstring) ------------------------


def _guarded(assign):
    def guarded(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size):
        bs, width = int(batch_size), req_to_token.shape[1]
        start, end = torch.as_tensor(start_offset)[:bs], torch.as_tensor(end_offset)[:bs]
        if bs and int(end.max()) > width:
            # Drop the columns past the row; the kernel reads each row's slots at the running offset
            # sum(end - start) of the rows before it, so the dropped slots leave out_cache_loc too, and a row that
            # starts past its width is clipped at both ends (a negative length would shift every later row's read).
            clip_end, clip_start = end.clamp(max=width), start.clamp(max=width)
            pieces, offset = [], 0
            for i in range(bs):
                pieces.append(out_cache_loc[offset: offset + int(clip_end[i] - clip_start[i])])
                offset += int(end[i] - start[i])
            dtype = torch.as_tensor(end_offset).dtype
            out_cache_loc, start_offset, end_offset = torch.cat(pieces), clip_start.to(dtype), clip_end.to(dtype)
        return assign(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size)

    return guarded


def _cache_locs(*, req_pool_indices, req_to_token, start_offset, end_offset, batch_size, draft_token_num, device):
    cols = start_offset.to(torch.int64).view(-1, 1) + torch.arange(draft_token_num)
    return req_to_token[req_pool_indices.to(torch.int64).view(-1, 1), cols].to(torch.int64).reshape(-1)


@contextlib.contextmanager
def cpu_kernels():
    """The bounds guard and the cache-location hook, for the duration of one call."""
    from sglang.kernels.ops.speculative import cache_locs
    from sglang.srt.mem_cache import allocation

    with patched(allocation, "assign_req_to_token_pool_func", _guarded(allocation.assign_req_to_token_pool_func)), \
            patched(cache_locs, "_get_oot_speculative_cache_locs_fn", lambda: _cache_locs):
        yield

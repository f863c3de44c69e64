"""What SGLang's scheduler and DSparkWorkerV2 need to run on a plain CPU host, as ONE scoped context manager.

`scheduler_env(context)` is entered around every call the step level makes into SGLang (building a Scheduler,
admitting requests, each scheduler iteration, an abort) and undone on exit; nothing here is applied process-wide,
so the other levels of the pack (and `runtime()`'s published dummy config) see SGLang untouched between calls.
Every substitution, with the bug classes it can hide:

1. The runtime context: the Scheduler's config is a model-owned `RuntimeContext` (SGLang's own `create_context`),
   activated with SGLang's own `use_context` for the duration of the call and the previous one restored by
   identity. So `runtime()`'s `override_server_args` (the other levels' dummy config) and the scheduler's
   published config coexist; neither re-projects the other's bags. Hides: nothing in SGLang (it is the embedding
   API SGLang ships for serialized in-process engines); a module that caches a config value at import would read
   the dummy one (none was found).
2. `speculative_hook._handle_dspark` (only while the context is created, i.e. while `ServerArgs` resolves): its
   device check sees "cuda". DSPARK is refused on a non-CUDA device at argument resolution. Hides: a DSPARK
   setting resolved differently for CUDA than for CPU (the resolved fields are the CUDA ones, which is what runs
   in production).
3. `rotary_embedding.base._is_cpu = True` (the module computed it before the CPU platform was known): the rope
   takes its native torch path instead of importing the vLLM fallback kernel. Hides: a bug in the fused CUDA rope
   kernels (positions are checked through the oracle, which is a function of the last token only, so a rope bug
   would not show anyway).
4. `DRAFT_ATTENTION_BACKEND_CHOICES` gets "torch_native" (appended on entry, removed on exit): the draft runner's
   attention backend is the torch one. Hides: bugs in the FlashInfer / FA3 / Triton draft attention backends.
5. `torch.Tensor.record_stream` is a no-op on CPU tensors (torch refuses a `torch.cpu.Stream`). Hides: a missing
   `record_stream` on a GPU tensor (use-after-free across streams), which only a GPU can show.
6. `runtime.cpu_kernels()`: the req-to-token assign kernel behind a bounds guard (columns past a row dropped, not
   written into the next row) and the speculative cache-location gather as a torch gather. Hides: a wrong gather
   in the CUDA kernels; an out-of-row write (the guard drops it instead of corrupting a neighbour; the KV
   bookkeeping contracts read the allocation lengths SGLang recorded, which stay untouched).
7. `TorchNativeAttnBackend.forward_extend` for TARGET_VERIFY batches that carry no `extend_prefix_lens`: the
   torch backend needs them. Each request extends after its `seq_lens` by its row of the batch's ragged verify
   layout (`spec_info.ragged_verify_layout.verify_lens`, read with SGLang's `resolve_ragged_verify_layout`: compact
   mode's packed rows) or, without one, by `spec_info.draft_token_num` (the static layout, which cap-accept also
   verifies). The query rows must be exactly those lengths: a padded graph tier (rows past the total) raises.
   Hides: bugs in how the GPU backends read the verify layout (qo_indptr, kv_indptr, custom masks, the tier's
   padding rows).

8. `bootstrap.init_parallel_runtime` (only while a Scheduler is constructed): when this process already built its
   parallel runtime (the first Scheduler did), a later Scheduler reuses it instead of raising "ran twice". Every
   Scheduler here is a single rank (tp = pp = dp = 1), so the groups it would build are the ones that exist: their
   handles (what the first bootstrap wrote into its context's parallel names) are copied into the new context.
   Hides: a parallel-runtime setup that differs between two configurations of one process (none at world size 1).

Not patches, but choices the probe made and this pack keeps: 3 target layers with `target_layer_ids [0, 1]`
(the draft reads two target layers' features), `SamplingParams.normalize(None)` then `.verify(vocab)` on each
request (what the TokenizerManager does before sending one), the scheduler's output sockets drained by PULL
sockets this process binds (the real send path runs; nobody reads the messages).
"""

from __future__ import annotations

import contextlib

import torch

from contracts.patching import patched


def _handle_dspark_as_cuda(original):
    import sglang.srt.arg_groups.speculative_hook as hook

    def handle(server_args):
        resolving_view = hook.resolving_view

        class View:
            def __init__(self, cfg):
                self._cfg = cfg

            def __getattr__(self, name):
                return "cuda" if name == "device" else getattr(self._cfg, name)

        with patched(hook, "resolving_view", lambda args: View(resolving_view(args))):
            return original(server_args)

    return handle


def create_scheduler_context(server_args):
    """A RuntimeContext of the scheduler's own (SGLang's `create_context`, role "scheduler", rank 0), built while
    the DSPARK device check sees cuda (substitution 2); the active process context is not replaced."""
    import sglang.srt.arg_groups.speculative_hook as hook
    from sglang.srt.runtime_context import SpawnRanks, create_context

    with patched(hook, "_handle_dspark", _handle_dspark_as_cuda(hook._handle_dspark)):
        return create_context(server_args, role="scheduler", ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0))


_BUILT_PARALLEL: dict = {}  # the parallel names (group handles, ranks) the first Scheduler's bootstrap wrote


def _init_parallel_once(original):
    from sglang.srt.distributed import bootstrap
    from sglang.srt.runtime_context import get_parallel

    def init_parallel_runtime(**kwargs):
        if not bootstrap._PARALLEL_INITIALISED:
            result = original(**kwargs)
            _BUILT_PARALLEL.update(get_parallel()._stamp)
            return result
        if not _BUILT_PARALLEL:
            return original(**kwargs)  # built outside this pack: SGLang's own "ran twice" error
        stamp = get_parallel()._stamp
        for name, value in _BUILT_PARALLEL.items():
            stamp.setdefault(name, value)
        return None

    return init_parallel_runtime


@contextlib.contextmanager
def scheduler_construction():
    """Substitution 8, around `Scheduler(...)` only."""
    from sglang.srt.distributed import bootstrap

    with patched(bootstrap, "init_parallel_runtime", _init_parallel_once(bootstrap.init_parallel_runtime)):
        yield


def _record_stream(original):
    def record_stream(self, stream):
        if self.device.type == "cpu":
            return None
        return original(self, stream)

    return record_stream


def _verify_lens(fb):
    """Each request's verify length in this TARGET_VERIFY batch: its ragged layout's row, else the static T."""
    from sglang.srt.speculative.ragged_verify import resolve_ragged_verify_layout

    layout = resolve_ragged_verify_layout(fb)
    if layout is not None:
        return layout.verify_lens.to(fb.seq_lens.dtype)
    return torch.full_like(fb.seq_lens, int(fb.spec_info.draft_token_num))


def _verify_extend(original):
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        fb = forward_batch
        if fb.forward_mode.is_target_verify() and fb.extend_prefix_lens is None:
            lens = _verify_lens(fb)
            if lens.shape[0] != fb.seq_lens.shape[0] or q.shape[0] != int(lens.sum()):
                raise NotImplementedError(f"TARGET_VERIFY with {q.shape[0]} query rows for verify lengths "
                                          f"{lens.tolist()}: only unpadded layouts run on the torch_native backend here")
            saved = fb.seq_lens, fb.extend_prefix_lens, fb.extend_seq_lens
            fb.extend_prefix_lens, fb.extend_seq_lens = fb.seq_lens, lens
            fb.seq_lens = fb.seq_lens + lens
            try:
                return original(self, q, k, v, layer, fb, save_kv_cache)
            finally:
                fb.seq_lens, fb.extend_prefix_lens, fb.extend_seq_lens = saved
        return original(self, q, k, v, layer, fb, save_kv_cache)

    return forward_extend


@contextlib.contextmanager
def scheduler_env(context=None):
    """Substitutions 1 and 3-7 of the module docstring, for the duration of one call into the scheduler
    (`context`: the scheduler's RuntimeContext, activated by SGLang's `use_context`; None leaves it)."""
    import sglang.srt.layers.rotary_embedding.base as rope_base
    from sglang.srt.arg_groups import choices
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
    from sglang.srt.runtime_context import use_context

    from contracts.adapters.sglang.runtime import cpu_kernels

    draft_choices = choices.DRAFT_ATTENTION_BACKEND_CHOICES
    added = "torch_native" not in draft_choices
    with contextlib.ExitStack() as stack:
        if context is not None:
            stack.enter_context(use_context(context))
        stack.enter_context(patched(rope_base, "_is_cpu", True))
        if added:
            draft_choices.append("torch_native")
            stack.callback(draft_choices.remove, "torch_native")
        stack.enter_context(patched(torch.Tensor, "record_stream", _record_stream(torch.Tensor.record_stream)))
        stack.enter_context(patched(TorchNativeAttnBackend, "forward_extend",
                                    _verify_extend(TorchNativeAttnBackend.forward_extend)))
        stack.enter_context(cpu_kernels())
        yield

"""SGLang's draft side on CPU: `DraftBlockProposer` through its own constructor, driven through `propose`.

The draft checkpoint is a config dict resolved by SGLang's own `resolve_runtime_config`
(gamma, verify width, mask token) and `get_dspark_sample_from_anchor`; the proposer
derives its query width Q itself. The Markov and confidence heads are SGLang's own
modules (`VanillaMarkov`, `DSparkConfidenceHead`) with seeded random weights.
Substituted, each with what it can hide:

* the draft model runner: `forward(fb)` records the ForwardBatch SGLang built and
  returns seeded hidden rows (hides: the draft model's own forward and attention);
* `compute_base_logits` (the model's LM head, an all-gather under TP): hidden @ W^T
  (hides: vocab-parallel gathers of the real head);
* `enable_num_token_non_padded` (reads the MoE/EP parallel context) and the
  parallel context's attention-DP widths (`get_parallel().override`), set per case
  as the worker's server flags would set them;
* the TP group: SpecTpSync over a one-rank group (real groups: the ranks level).
"""

from __future__ import annotations

import contextlib
import types
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch

from contracts.adapters.sglang import env as sglang_env
from contracts.adapters.sglang.runtime import CPU, cpu_kernels, runtime, single_rank_tp_sync

DRAFT_VOCAB = 64
HIDDEN = 8
MARKOV_RANK = 4


class RecordingDraftRunner:
    """What DraftBlockProposer reads from its draft model runner; forward records the batch it is given."""

    device = CPU
    decode_cuda_graph_runner = None

    def __init__(self, translator, seed: int):
        self.kv_index_translator = translator
        self.attn_backend = SimpleNamespace(needs_cpu_seq_lens=True)
        self.batches: list = []
        self._gen = torch.Generator().manual_seed(seed)

    def forward(self, fb):
        self.batches.append(fb)
        rows = fb.input_ids.numel()
        hidden = torch.randn(rows, HIDDEN, generator=self._gen)
        # Columns 0 and 1 carry (request row, position) of each query row, for an oracle draft head.
        hidden[:, 0] = torch.arange(rows, dtype=torch.float32) // max(rows // max(fb.batch_size, 1), 1)
        hidden[:, 1] = fb.positions.to(torch.float32)
        return SimpleNamespace(logits_output=SimpleNamespace(hidden_states=hidden), can_run_graph=False)


def _draft_model(*, sample_from_anchor: bool, vocab: int, seed: int, oracle=None):
    """`oracle(request_row, position) -> token`: a draft head that knows the target's greedy continuation. A
    query row at position p predicts position p + 1 when the anchor row samples (next-token), else p (the masked
    token at p), as DSpark's two draft layouts define."""
    from sglang.srt.models.dspark import DSparkConfidenceHead, DSparkDraftMixin, VanillaMarkov

    torch.manual_seed(seed)  # the heads initialise from the global generator
    lm_w = torch.randn(vocab, HIDDEN)

    def base_logits(h):
        if oracle is None:
            return h @ lm_w.T, h
        ahead = 1 if sample_from_anchor else 0
        out = torch.zeros(h.shape[0], vocab)
        for i, (b, p) in enumerate(h[:, :2].round().to(torch.int64).tolist()):
            out[i, oracle(b, p + ahead)] = 1e3  # dominates the Markov head's bias
        return out, h

    model = SimpleNamespace(
        sample_from_anchor=sample_from_anchor, embed_tokens=torch.nn.Embedding(vocab, HIDDEN),
        markov_head=VanillaMarkov(vocab_size=vocab, markov_rank=MARKOV_RANK),
        confidence_head=DSparkConfidenceHead(hidden_size=HIDDEN, markov_rank=MARKOV_RANK),
        compute_base_logits=base_logits)
    model.compute_confidence = types.MethodType(DSparkDraftMixin.compute_confidence, model)
    return model


@dataclass
class DraftSide:
    proposer: object
    runner: RecordingDraftRunner
    translator: object
    target_model: object
    gamma: int
    verify_num_draft_tokens: int
    fills: list = field(default_factory=list)  # (before, after, fb copy before the fill) per fill


def parallel_context(dp_moe_sync: bool):
    """The attention-DP widths the proposer's constructor reads (resolve_draft_parallel_layout)."""
    from sglang.srt.runtime_context import get_parallel

    if not dp_moe_sync:
        return get_parallel().override(attn_dp_enabled=False, attn_tp_size=1)
    return get_parallel().override(attn_dp_enabled=True, tp_size=2, moe_tp_size=2, attn_dp_size=2, attn_tp_size=1, attn_cp_size=1,
                                   enable_prefill_cp=False, attn_tp_group=SimpleNamespace(world_size=1, rank_in_group=0))


def build_draft_side(*, gamma: int, sample_from_anchor: bool, dp_moe_sync: bool, enable_num_token_non_padded: bool,
                     req_to_token_pool, allocator, vocab: int = DRAFT_VOCAB, seed: int = 0,
                     record_fill=None, oracle=None) -> DraftSide:
    from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator
    from sglang.srt.speculative.draft_worker_common import make_draft_block_spec_info
    from sglang.srt.speculative.dspark_components.dspark_config import get_dspark_sample_from_anchor, resolve_runtime_config
    from sglang.srt.speculative.dspark_components.dspark_draft import DraftBlockProposer

    checkpoint = {"dflash_config": {"block_size": gamma, "markov_rank": MARKOV_RANK, "markov_head_type": "vanilla",
                                    "mask_token_id": vocab - 1}, "sample_from_anchor": sample_from_anchor}
    rc = resolve_runtime_config(draft_hf_config=checkpoint, speculative_num_draft_tokens=gamma + 1, target_vocab_size=vocab)
    translator = KVIndexTranslator(req_to_token=req_to_token_pool.req_to_token, token_to_kv_pool_allocator=allocator,
                                   token_to_kv_pool=None, page_size=allocator.page_size, device="cpu")
    runner = RecordingDraftRunner(translator, seed)
    model = _draft_model(sample_from_anchor=get_dspark_sample_from_anchor(checkpoint), vocab=vocab, seed=seed, oracle=oracle)
    with sglang_env.num_token_non_padded(enable_num_token_non_padded), parallel_context(dp_moe_sync):
        # The worker's spec info of the draft block is sized by its query width (dspark_worker_v2: query_token_num).
        q = rc.gamma if model.sample_from_anchor else rc.gamma + 1
        proposer = DraftBlockProposer(
            draft_model=model, draft_model_runner=runner, gamma=rc.gamma, mask_token_id=rc.mask_token_id,
            draft_block_spec_info=make_draft_block_spec_info(draft_token_num=q, device=CPU),
            tp_sync=single_rank_tp_sync(), random_seed=seed, greedy_draft=False,
            dp_moe_sync=dp_moe_sync)
    target = SimpleNamespace(get_input_embeddings=lambda: model.embed_tokens)
    side = DraftSide(proposer, runner, translator, target, rc.gamma, rc.verify_num_draft_tokens)
    if record_fill is not None:
        real = proposer._fill_dp_moe_sync_metadata

        def recording(fb, batch):  # a wrapper on this instance: SGLang's fill still does the work
            before, copy = record_fill(fb), _shallow_copy(fb)
            real(fb, batch)
            side.fills.append((before, record_fill(fb), copy))

        proposer._fill_dp_moe_sync_metadata = recording
    return side


def _shallow_copy(fb):
    import copy

    return copy.copy(fb)


def verify_window(side: DraftSide, batch):
    from sglang.srt.speculative.draft_worker_common import build_block_pos_offsets
    from sglang.srt.speculative.dspark_components.dspark_planner import alloc_verify_window

    T = side.verify_num_draft_tokens
    with cpu_kernels():
        return alloc_verify_window(batch=batch, bs=len(batch.reqs), device="cpu", verify_num_draft_tokens=T,
                                   block_pos_offsets=build_block_pos_offsets(length=T, device=CPU),
                                   model_runner=SimpleNamespace(kv_index_translator=side.translator),
                                   seq_lens_cpu=batch.seq_lens_cpu)


def propose(side: DraftSide, batch, *, dp_moe_sync: bool, enable_num_token_non_padded: bool, sampling_info=None,
            window=None):
    """One draft block through `DraftBlockProposer.propose`, as `DSparkWorkerV2._forward_decode` calls it."""
    window = window if window is not None else verify_window(side, batch)
    with sglang_env.num_token_non_padded(enable_num_token_non_padded), parallel_context(dp_moe_sync), cpu_kernels():
        return side.proposer.propose(batch=batch, draft_input=batch.spec_info, verify_window=window, bs=len(batch.reqs),
                                     device="cpu", target_model=side.target_model, sampling_info=sampling_info), window


def idle_participation(side: DraftSide, batch, *, dp_moe_sync: bool, enable_num_token_non_padded: bool) -> None:
    with sglang_env.num_token_non_padded(enable_num_token_non_padded), parallel_context(dp_moe_sync), cpu_kernels():
        side.proposer.run_idle_participation(batch)


@contextlib.contextmanager
def decode_config(side: DraftSide):
    with runtime().config(num_draft_tokens=side.verify_num_draft_tokens):
        yield


class _SwaDraftPool:
    """The surface of SGLang's DeepSeek-V4 draft KV pool that the commit-inject path reads: its slot translation
    is the real one (`DeepSeekV4TokenToKVPool.translate_loc_from_full_to_swa`, a gather through the mapping);
    the pool's storage is not built (it needs a GPU-sized config)."""

    swa_req_ring_size = None
    sliding_window = None
    set_swa_key_buffer_radix_fused_norm_rope = None  # its presence selects the SWA (MLA) inject path

    def __init__(self, slots: int):
        from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4TokenToKVPool

        self.full_to_swa_index_mapping = torch.arange(slots + 1, dtype=torch.int64)
        self._translate = DeepSeekV4TokenToKVPool.translate_loc_from_full_to_swa

    def translate_loc_from_full_to_swa(self, loc):
        return self._translate(self, loc)


class _RecordingDraftModel:
    """The draft model's KV write: records what SGLang's injector hands it."""

    def __init__(self):
        self.calls = []

    def write_target_hidden_kv(self, **kw):
        self.calls.append(kw)


def commit_inject(side: DraftSide, batch, window, commit_lens: torch.Tensor, pools):
    """`TargetVerifyExecutor.commit_hidden` (the worker's eager commit) with a real `TargetHiddenKvInjector`;
    the target's hidden row of verify row i is the constant i, so what is written says which row it came from."""
    from sglang.srt.speculative.draft_worker_common import build_block_pos_offsets
    from sglang.srt.speculative.dspark_components.dspark_kv_inject import TargetHiddenKvInjector
    from sglang.srt.speculative.dspark_components.dspark_verify import TargetVerifyExecutor

    T, bs = side.verify_num_draft_tokens, len(batch.reqs)
    target_runner = SimpleNamespace(device=CPU, kv_index_translator=side.translator,
                                    req_to_token_pool=pools.req_to_token_pool)
    model = _RecordingDraftModel()
    offsets = build_block_pos_offsets(length=T, device=CPU)
    slots = int(pools.req_to_token_pool.req_to_token.max()) + 1
    injector = TargetHiddenKvInjector(
        draft_model=model, model_runner=target_runner, device=CPU, verify_num_draft_tokens=T,
        draft_model_runner=SimpleNamespace(token_to_kv_pool=_SwaDraftPool(slots), kv_index_translator=side.translator),
        block_pos_offsets=offsets)
    executor = TargetVerifyExecutor(
        target_worker=SimpleNamespace(model_runner=SimpleNamespace(model_config=SimpleNamespace(
            hf_text_config=SimpleNamespace(model_type="dspark-contracts")))),
        gamma=T - 1, verify_num_draft_tokens=T, model_runner=target_runner, kv_injector=injector,
        tp_sync=single_rank_tp_sync())
    hidden = torch.arange(bs * T, dtype=torch.float32)[:, None].repeat(1, HIDDEN)
    with cpu_kernels():
        executor.commit_hidden(batch=batch, layout=None, hidden_strided=hidden, verify_window=window,
                               logits_output=SimpleNamespace(hidden_states=hidden), commit_lens=commit_lens, bs=bs,
                               run_compact=False)
    (call,) = model.calls
    return call

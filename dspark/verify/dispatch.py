"""Public verify ops: validate, then run the torch reference or the Triton kernel.

``backend="auto"`` runs Triton for CUDA tensors and torch otherwise (SGLang's
rule). ``backend="triton"`` on CPU tensors runs the Triton interpreter, which
needs ``TRITON_INTERPRET=1`` in the environment before the kernel module is
first imported; it is imported here lazily, on the first Triton call, so a
test module can still set the variable at its top.

``check=False`` skips the argument checks that read tensor contents (and so
synchronise the device); they are skipped anyway while a CUDA graph is being
captured. Shape, dtype and device checks always run.
"""

from __future__ import annotations

import importlib.util

import torch

from . import reference, validate
from .results import AcceptOut, Finalized


def _kernels():
    from . import triton_kernels  # lazy on purpose: the import fixes compiled vs interpreted

    return triton_kernels


def triton_runs_on_cpu() -> bool:
    """Whether ``backend="triton"`` can take CPU tensors in this process: Triton installed and its interpreter on
    (imports the kernel module, which fixes the mode)."""
    try:
        return bool(_kernels().INTERPRETED)
    except ImportError:
        return False


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _read_values(check: bool) -> bool:
    return bool(check) and not _capturing()


def _impl(backend: str, device: torch.device):
    if backend == "auto":
        use_triton = device.type == "cuda" and importlib.util.find_spec("triton") is not None
        backend = "triton" if use_triton else "torch"
    if backend == "torch":
        return reference
    kernels = _kernels()
    if device.type != "cuda" and not kernels.INTERPRETED:
        raise RuntimeError(
            "backend='triton' on CPU tensors needs the Triton interpreter: set TRITON_INTERPRET=1 before "
            "dspark.verify.triton_kernels is first imported")
    return kernels


def greedy_accept(candidates: torch.Tensor, target_logits: torch.Tensor, verify_lens: torch.Tensor | None = None,
                  *, backend: str = "auto", check: bool = True) -> AcceptOut:
    """Greedy verify: accept the longest prefix of drafts equal to the target's argmax.

    candidates [bs, gamma+1] int (col 0 = anchor); target_logits [bs, gamma+1, V]
    float16/bfloat16/float32/float64; verify_lens [bs] int in [1, gamma+1] or None.
    """
    validate.check_backend(backend)
    validate.greedy_args(candidates, target_logits, verify_lens, values=_read_values(check))
    return _impl(backend, candidates.device).greedy_accept(candidates, target_logits, verify_lens)


def sampling_accept(candidates: torch.Tensor, target_probs: torch.Tensor, draft_probs: torch.Tensor | None,
                    coins: torch.Tensor, resample_noise: torch.Tensor, verify_lens: torch.Tensor | None = None,
                    *, backend: str = "auto", check: bool = True) -> AcceptOut:
    """Chain rejection sampling with the randomness passed in.

    target_probs [bs, gamma+1, V]; draft_probs [bs, gamma, V] or None (one-hot
    draft on the candidates); coins [bs, gamma] in [0, 1); resample_noise
    [bs, V] inverse exponential weights 1/E, E ~ Exp(1) (see reference.py).
    """
    validate.check_backend(backend)
    validate.sampling_args(candidates, target_probs, draft_probs, coins, resample_noise, verify_lens,
                           values=_read_values(check))
    impl = _impl(backend, candidates.device)
    return impl.sampling_accept(candidates, target_probs, draft_probs, coins, resample_noise, verify_lens)


def mixed_accept(candidates: torch.Tensor, target_logits: torch.Tensor, target_probs: torch.Tensor,
                 draft_probs: torch.Tensor | None, coins: torch.Tensor, resample_noise: torch.Tensor,
                 greedy_mask: torch.Tensor, verify_lens: torch.Tensor | None = None,
                 *, backend: str = "auto", check: bool = True) -> AcceptOut:
    """Greedy verify on rows where ``greedy_mask`` [bs] bool is set, sampling elsewhere.

    Both verifies run on every row (fixed shapes, graph-capturable) and a
    per-row select keeps one; greedy rows equal ``greedy_accept`` bit for bit.
    Probability rows of greedy requests are never checked and may hold anything.
    """
    validate.check_backend(backend)
    validate.mixed_args(candidates, target_logits, target_probs, draft_probs, coins, resample_noise, greedy_mask,
                        verify_lens, values=_read_values(check))
    impl = _impl(backend, candidates.device)
    greedy = impl.greedy_accept(candidates, target_logits, verify_lens)
    sampled = impl.sampling_accept(candidates, target_probs, draft_probs, coins, resample_noise, verify_lens)
    return reference.select_mixed(greedy, sampled, greedy_mask)


def finalize(prefix_lens: torch.Tensor, drafts: torch.Tensor, accept: AcceptOut,
             *, backend: str = "auto", check: bool = True) -> Finalized:
    """Commit lengths, new sequence lengths and the emitted tokens of one verify step."""
    validate.check_backend(backend)
    validate.finalize_args(prefix_lens, drafts, accept, values=_read_values(check))
    return _impl(backend, drafts.device).finalize(prefix_lens, drafts, accept)

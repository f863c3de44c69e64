"""REQ-002 (SGLang 0.5.23): DSpark's sampled accept ignores min_p.

Plain decoding's sampler (`layers/sampler.py`, `top_k_top_p_min_p_sampling_from_probs_torch`, and the flashinfer
`min_p_sampling_from_probs` on CUDA) drops every token whose probability is below min_p times the largest, after
temperature, top-k and top-p. DSpark's sampled accept (`dspark_accept.accept_sampling` -> `_accept_sampling_core`)
builds the law it accepts and resamples against from temperature, top-k and top-p only (`SoftmaxTemp` or
`build_speculative_verify_target_probs`) and never reads `sampling_info.min_ps`; block-wise rejection
(`dspark_verify._blockwise_rejection_applies`, `BlockwiseRejection`) does not either. So a sampled request with
min_p draws tokens min_p excludes.

Case: V 8, gamma 2, one sampled request (temperature 1, min_p 0.3), target logits seeded; the target law the chain
kernel (`chain_speculative_sampling_triton`, the default accept) is handed, against the law plain decoding samples
from at each column.

    python findings/sglang/req_002_accept_ignores_min_p.py             # exits 1 on sglang 0.5.23
    python findings/sglang/req_002_accept_ignores_min_p.py --with-fix  # in-process fix, exits 0

Imports only the standard library, torch and sglang (plus _cpu_setup.py and _requests.py next to this file).
"""

import argparse
import os
import sys
from types import SimpleNamespace

sys.dont_write_bytecode = True  # no __pycache__ next to the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _cpu_setup  # noqa: E402

FINDING = "REQ-002"
V, GAMMA, MIN_P = 8, 2, 0.3


def apply_fix():
    """Minimal correction: cut the accept's target law with min_p (after temperature, top-k, top-p; renormalised),
    as the plain sampler does."""
    import contextvars

    import torch
    from sglang.kernels.ops.speculative.dspark import dspark_accept

    current = contextvars.ContextVar("sampling_info", default=None)
    real_core, real_softmax = dspark_accept._accept_sampling_core, dspark_accept.SoftmaxTemp
    real_build = dspark_accept.build_speculative_verify_target_probs

    def cut(probs, rows_per_request):
        info = current.get()
        if info is None or not info.need_min_p_sampling:
            return probs
        p = probs.reshape(-1, probs.shape[-1])
        min_p = torch.repeat_interleave(info.min_ps.to(p.dtype), rows_per_request, dim=0)[:, None]
        p = torch.where(p >= min_p * p.max(dim=-1, keepdim=True).values, p, 0.0)
        return (p / p.sum(dim=-1, keepdim=True)).reshape(probs.shape)

    class SoftmaxTemp:
        @staticmethod
        def execute(*, logits, temperatures, rows_per_request, **kw):
            return cut(real_softmax.execute(logits=logits, temperatures=temperatures,
                                            rows_per_request=rows_per_request, **kw), rows_per_request)

    def core(**kw):
        token = current.set(kw["sampling_info"])
        try:
            return real_core(**kw)
        finally:
            current.reset(token)

    dspark_accept._accept_sampling_core = core
    dspark_accept.SoftmaxTemp = SoftmaxTemp
    dspark_accept.build_speculative_verify_target_probs = lambda **kw: cut(real_build(**kw), kw["draft_token_num"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--with-fix", action="store_true", help="apply the minimal correction in-process first")
    args = ap.parse_args()
    _cpu_setup.require_version(FINDING)
    _cpu_setup.publish(speculative_algorithm="DSPARK", speculative_num_draft_tokens=GAMMA + 1, page_size=1,
                       disable_overlap_schedule=True, max_running_requests=8, attention_backend="torch_native")

    import torch
    import _requests
    from sglang.kernels.ops.speculative.dspark import dspark_accept

    if args.with_fix:
        apply_fix()

    T = GAMMA + 1
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(T, V, generator=gen) * 1.5  # the target's verify logits, one row per column
    b = _requests.batch([_requests.request("r0", [0], [1], V, max_new_tokens=10, temperature=1.0, min_p=MIN_P)], V)
    info = b.sampling_info.copy_for_forward()  # what the Scheduler hands the worker

    # Plain decoding's law at each column: softmax at the temperature, then min_p (sampler.py: probs below
    # min_p * max dropped; the multinomial renormalises).
    probs = torch.softmax(logits / 1.0, dim=-1)
    expected = torch.where(probs >= MIN_P * probs.max(dim=-1, keepdim=True).values, probs, 0.0)
    expected = expected / expected.sum(dim=-1, keepdim=True)

    seen = []
    real_chain = dspark_accept.chain_speculative_sampling_triton

    def chain(**kw):  # records the law the accept hands its chain kernel, then runs it
        seen.append(kw["target_probs"].detach().clone())
        return real_chain(**kw)

    dspark_accept.chain_speculative_sampling_triton = chain
    draft_probs = torch.softmax(torch.randn(1, GAMMA, V, generator=gen), dim=-1)
    dspark_accept.accept_sampling(candidates=torch.tensor([[1, 2, 3]]), target_logits=logits.clone(),
                                  draft_probs=draft_probs, sampling_info=info,
                                  draft_input=SimpleNamespace(max_top_k=None, uniform_top_k_value=None), gamma=GAMMA,
                                  verify_num_draft_tokens=T)
    observed = seen[0].reshape(T, V).double()
    ok = True
    for j in range(T):
        err = float((observed[j] - expected[j].double()).abs().max())
        ok &= err <= 1e-5
        print(f"column {j}:")
        print(f"  expected: {[round(v, 4) for v in expected[j].tolist()]}")
        print(f"  observed: {[round(v, 4) for v in observed[j].tolist()]}  (max error {err:.3g})")
    print(f"{FINDING}: {'PASS' if ok else 'FAIL'}{' (with fix)' if args.with_fix else ''}")
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # an error is neither "reproduced" (1) nor "fixed" (0)
        import traceback

        traceback.print_exc()
        sys.exit(3)

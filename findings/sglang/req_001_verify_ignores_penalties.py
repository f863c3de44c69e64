"""REQ-001/002/003/005 (SGLang 0.5.23): DSpark's verify logits carry none of the request's frequency, presence or
repetition penalties, nor its min_new_tokens mask.

Plain decoding applies them in the sampler: the Scheduler hands the forward `SamplingBatchInfo.copy_for_forward()`,
whose `acc_additive_penalties` (frequency, presence, the min_new_tokens mask) and `acc_scaling_penalties`
(repetition) the sampler applies before the logit bias. DSpark's static verify
(`TargetVerifyExecutor.run_non_compact`) calls `dflash_utils.apply_dflash_verify_logits_adjustments` with that same
copy, which reads the nonexistent `acc_linear_penalties`, never reads `acc_scaling_penalties`, and falls back to the
orchestrator only when one is attached (the copy has none): only the logit bias reaches the verify. A verify column
must also read the penalties as plain decoding would at that position: the committed output plus the candidates
before it.

Case: V 8, gamma 2 (T = 3), one greedy request, prompt [0], committed output [1, 1] (the anchor is 1), candidates
[1, 2, 3]; frequency_penalty 1.0, repetition_penalty 2.0, min_new_tokens 4 with stop token id 3. Plain decoding's
logits at each column come from SGLang's own penalizers (the committed output, then each candidate, fed as its
decode steps feed them) through `copy_for_forward` and `apply_logits_bias`, as the sampler applies them.

    python findings/sglang/req_001_verify_ignores_penalties.py             # exits 1 on sglang 0.5.23
    python findings/sglang/req_001_verify_ignores_penalties.py --with-fix  # in-process fix, exits 0

Imports only the standard library, torch and sglang (plus _cpu_setup.py and _requests.py next to this file).
"""

import argparse
import os
import sys
from types import SimpleNamespace

sys.dont_write_bytecode = True  # no __pycache__ next to the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _cpu_setup  # noqa: E402

FINDING = "REQ-001"
V, GAMMA = 8, 2
PROMPT, OUTPUT, CANDIDATES = [0], [1, 1], [1, 2, 3]
PARAMS = dict(max_new_tokens=10, temperature=0.0, frequency_penalty=1.0, repetition_penalty=2.0, min_new_tokens=4,
              stop_token_ids=[3])


def apply_fix():
    """Minimal correction: the static verify applies the penalties per column (committed output plus the candidates
    before the column: additive, then scaling), then SGLang's own adjustments (custom processors, logit bias)."""
    import torch
    from sglang.srt.sampling.penaltylib.repetition_penalty import apply_scaling_penalties
    from sglang.srt.speculative import dflash_utils
    from sglang.srt.speculative.dspark_components.dspark_verify import TargetVerifyExecutor

    real = TargetVerifyExecutor.run_non_compact

    def penalize(logits, reqs, verify_ids):
        bs, T = verify_ids.shape
        x = logits.view(bs, T, -1)
        vocab = x.shape[-1]
        for i, req in enumerate(reqs):
            sp = req.sampling_params
            out = torch.tensor(req.output_ids, dtype=torch.int64)
            drafts = torch.nn.functional.one_hot(verify_ids[i, 1:].to(torch.int64), vocab)
            counts = torch.bincount(out, minlength=vocab)[None, :] + torch.cat(
                [torch.zeros_like(drafts[:1]), drafts.cumsum(0)])  # [T, V]: column j after candidates 1..j
            add = -(sp.frequency_penalty * counts + sp.presence_penalty * (counts > 0))
            stops = sorted(set(sp.stop_token_ids or ()) | set(req.eos_token_ids or ()))
            if sp.min_new_tokens > 0 and stops:
                short = (len(out) + torch.arange(T)) < sp.min_new_tokens
                add[:, stops] = torch.where(short[:, None], float("-inf"), add[:, stops])
            x[i].add_(add.to(x.dtype))
            if sp.repetition_penalty != 1.0:
                col = x[i].clone()
                apply_scaling_penalties(col, torch.where(counts > 0, sp.repetition_penalty, 1.0).to(x.dtype))
                x[i].copy_(col)

    def run_non_compact(self, *, batch, draft_input, verify_ids_2d, verify_window, sampling_info):
        result = real(self, batch=batch, draft_input=draft_input, verify_ids_2d=verify_ids_2d,
                      verify_window=verify_window, sampling_info=None)
        if sampling_info is not None:
            logits = result.logits_output.next_token_logits
            penalize(logits, batch.reqs, verify_ids_2d)
            dflash_utils.apply_dflash_verify_logits_adjustments(
                next_token_logits=logits, sampling_info=sampling_info, draft_token_num=verify_ids_2d.shape[1])
        return result

    TargetVerifyExecutor.run_non_compact = run_non_compact


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--with-fix", action="store_true", help="apply the minimal correction in-process first")
    args = ap.parse_args()
    _cpu_setup.require_version(FINDING)
    _cpu_setup.publish(speculative_algorithm="DSPARK", speculative_num_draft_tokens=GAMMA + 1, page_size=1,
                       disable_overlap_schedule=True, max_running_requests=8, attention_backend="torch_native")

    import torch
    import _requests
    from sglang.srt.speculative.dspark_components.dspark_verify import TargetVerifyExecutor, TargetVerifyResult

    if args.with_fix:
        apply_fix()

    T = GAMMA + 1
    raw = torch.randn(T, V, generator=torch.Generator().manual_seed(0))  # the target's logits at each verify column

    # Plain decoding: SGLang's own penalizers fed the committed output, then each candidate, one decode step at a
    # time; each column's logits as the sampler sees them (copy_for_forward, then apply_logits_bias).
    plain = _requests.batch([_requests.request("plain", PROMPT, OUTPUT, V, **PARAMS)], V, algorithm="NONE")
    for tok in OUTPUT:
        _requests.feed(plain, tok)
    expected = []
    for j in range(T):
        x = raw[j: j + 1].clone()
        plain.sampling_info.copy_for_forward().apply_logits_bias(x)
        expected.append(x[0])
        if j + 1 < T:
            plain.reqs[0].output_ids.append(CANDIDATES[j + 1])
            _requests.feed(plain, CANDIDATES[j + 1])

    # DSpark: the same request's batch, its penalizers fed the same committed output (the state is right here; that
    # DSpark never feeds them is REQ-004), the forward copy handed to the static verify. The target forward is the
    # one stand-in: it returns `raw`.
    dspark = _requests.batch([_requests.request("dspark", PROMPT, OUTPUT, V, **PARAMS)], V)
    for tok in OUTPUT:
        _requests.feed(dspark, tok)
    logits = raw.clone()
    executor = SimpleNamespace(
        verify_num_draft_tokens=T, _verify_backend_self_adds_seq_lens=lambda: True,
        _forward_prepared_verify=lambda **kw: TargetVerifyResult(
            logits_output=SimpleNamespace(next_token_logits=logits), can_run_cuda_graph=False))
    window = SimpleNamespace(positions_2d=torch.arange(len(PROMPT) + len(OUTPUT) - 1, len(PROMPT) + len(OUTPUT) - 1 + T)[None],
                             verify_cache_loc=torch.zeros(T, dtype=torch.int64), kv_loc_plan=None)
    TargetVerifyExecutor.run_non_compact(executor, batch=dspark, draft_input=None,
                                         verify_ids_2d=torch.tensor([CANDIDATES]), verify_window=window,
                                         sampling_info=dspark.sampling_info.copy_for_forward())

    ok = True
    for j in range(T):
        want, got = expected[j], logits[j]
        same = torch.equal(torch.isinf(want), torch.isinf(got)) and torch.allclose(
            torch.nan_to_num(want, neginf=0.0), torch.nan_to_num(got, neginf=0.0), atol=1e-5)
        ok &= same
        history = OUTPUT + CANDIDATES[1: j + 1]
        print(f"column {j} (output {history}):")
        print(f"  expected: {[round(v, 4) for v in want.tolist()]}  argmax {int(want.argmax())}")
        print(f"  observed: {[round(v, 4) for v in got.tolist()]}  argmax {int(got.argmax())}")
    print(f"{FINDING}: {'PASS' if ok else 'FAIL'}{' (with fix)' if args.with_fix else ''}")
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # an error is neither "reproduced" (1) nor "fixed" (0)
        import traceback

        traceback.print_exc()
        sys.exit(3)

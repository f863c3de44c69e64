"""REQ-004 (SGLang 0.5.23): under DSPARK (the DFlash family) the penalizers never see the output.

Plain decoding feeds each request's newest token to its penalizers in `ScheduleBatch.prepare_for_decode`
(`cumulate_penalty_output_tokens`, before every decode step; EAGLE does the same in `eagle_prepare_for_decode`). A
speculative batch takes the branch above it (`spec_prepare_for_decode`), and its DFlash branch only calls the draft
input's `prepare_for_decode` (the KV reservation): the frequency counts, the presence and repetition seen sets and
the min_new_tokens length stay zero for the whole request, first token included. The verify drops that state today
(REQ-001's finding), so outputs do not read it yet; a fix of the verify that reads it (sgl-project/sglang#33869)
would penalise nothing and keep the min_new_tokens mask on for the whole request.

Case: one greedy request (frequency_penalty 1.0, repetition_penalty 2.0, min_new_tokens 4, stop token id 3), prompt
[0], decoded under DSPARK: its first token 1 (the prefill), then two decode steps commit [1, 4] and [2]. Before each
decode, the batch runs SGLang's own `ScheduleBatch.prepare_for_decode`; the one stand-in is the draft input's KV
reservation (`DFlashDraftInputV2.prepare_for_decode`, which reads no penalty state), a no-op here.

    python findings/sglang/req_004_penalizers_never_fed.py             # exits 1 on sglang 0.5.23
    python findings/sglang/req_004_penalizers_never_fed.py --with-fix  # in-process fix, exits 0

Imports only the standard library, torch and sglang (plus _cpu_setup.py and _requests.py next to this file).
"""

import argparse
import os
import sys
from types import SimpleNamespace

sys.dont_write_bytecode = True  # no __pycache__ next to the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _cpu_setup  # noqa: E402

FINDING = "REQ-004"
V, GAMMA = 8, 2
PARAMS = dict(max_new_tokens=10, temperature=0.0, frequency_penalty=1.0, repetition_penalty=2.0, min_new_tokens=4,
              stop_token_ids=[3])
FIRST, COMMITS = 1, ([1, 4], [2])


def apply_fix():
    """Minimal correction: before a DFlash-family decode, assign every prepared penalizer's row from the request's
    committed output (idempotent, so the prefill's first token and a PD handoff's are counted once)."""
    import torch
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    real = ScheduleBatch.prepare_for_decode

    def sync(batch):
        orch = batch.sampling_info.penalizer_orchestrator
        if orch is None or not orch.is_required:
            return
        for pen in orch.penalizers.values():
            if not pen.is_prepared():
                continue
            name = type(pen).__name__
            for i, req in enumerate(batch.reqs):
                out = torch.tensor(req.output_ids, dtype=torch.int64)
                if name == "BatchedFrequencyPenalizer":
                    counts = torch.bincount(out, minlength=orch.vocab_size)[: orch.vocab_size].float()
                    pen.cumulated_frequency_penalties[i] = pen.frequency_penalties[i] * counts
                elif name == "BatchedPresencePenalizer":
                    pen.cumulated_presence_penalties[i] = 0.0
                    pen.cumulated_presence_penalties[i, out] = pen.presence_penalties[i]
                elif name == "BatchedRepetitionPenalizer":
                    pen.cumulated_repetition_penalties[i] = 1.0
                    pen.cumulated_repetition_penalties[i, out] = pen.repetition_penalties[i]
                elif name == "BatchedMinNewTokensPenalizer":
                    pen.len_output_tokens[i] = len(out)

    def prepare_for_decode(self):
        if self.spec_algorithm.is_dflash_family():
            sync(self)
        return real(self)

    ScheduleBatch.prepare_for_decode = prepare_for_decode


def state(batch) -> dict:
    """What the penalizers hold for row 0, read back into tokens: counts, seen set, output length."""
    pens = {type(p).__name__: p for p in batch.sampling_info.penalizer_orchestrator.penalizers.values()}
    freq, rep = pens["BatchedFrequencyPenalizer"], pens["BatchedRepetitionPenalizer"]
    counts = (freq.cumulated_frequency_penalties[0] / freq.frequency_penalties[0]).round().long().tolist()
    return {"frequency counts": {t: n for t, n in enumerate(counts) if n},
            "repetition seen": sorted((rep.cumulated_repetition_penalties[0] != 1.0).nonzero().flatten().tolist()),
            "min_new_tokens length": int(pens["BatchedMinNewTokensPenalizer"].len_output_tokens[0])}


def want(output) -> dict:
    return {"frequency counts": {t: output.count(t) for t in sorted(set(output))},
            "repetition seen": sorted(set(output)), "min_new_tokens length": len(output)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--with-fix", action="store_true", help="apply the minimal correction in-process first")
    args = ap.parse_args()
    _cpu_setup.require_version(FINDING)
    _cpu_setup.publish(speculative_algorithm="DSPARK", speculative_num_draft_tokens=GAMMA + 1, page_size=1,
                       disable_overlap_schedule=True, max_running_requests=8, attention_backend="torch_native")

    import _requests

    if args.with_fix:
        apply_fix()

    b = _requests.batch([_requests.request("r0", [0], [FIRST], V, **PARAMS)], V)
    b.spec_info = SimpleNamespace(prepare_for_decode=lambda batch: None)  # the draft input's KV reservation
    ok = True
    for step, commit in enumerate(COMMITS):
        b.prepare_for_decode()  # before the verify of this step: the state it reads
        output = list(b.reqs[0].output_ids)
        got, expected = state(b), want(output)
        ok &= got == expected
        print(f"before decode step {step} (output {output}):")
        print(f"  expected: {expected}")
        print(f"  observed: {got}")
        b.reqs[0].output_ids.extend(commit)  # the step's accepted run, as process_batch_result_decode extends it
    print(f"{FINDING}: {'PASS' if ok else 'FAIL'}{' (with fix)' if args.with_fix else ''}")
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # an error is neither "reproduced" (1) nor "fixed" (0)
        import traceback

        traceback.print_exc()
        sys.exit(3)

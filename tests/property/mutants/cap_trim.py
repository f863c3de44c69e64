"""The cap_trim count (verify.cap-trim): drafts past a row's verify cap that would have been accepted.

An engine that declares verify.cap-trim promises this DSpark count; the mutant drops it, as an engine would that
never looks past the cap (vLLM schedules only L-1 drafts and reports 0, which is why it does not declare the
capability). `dspark.verify.dispatch` looks `reference.greedy_accept` up at call time.
"""

import torch

from dspark.verify import reference
from dspark.verify.results import AcceptOut

from . import Mutant

_real_greedy = reference.greedy_accept


def _greedy_without_cap_trim(candidates, target_logits, verify_lens=None):
    out = _real_greedy(candidates, target_logits, verify_lens)
    return AcceptOut(out.correct_len, out.bonus, torch.zeros_like(out.cap_trim))


MUTANTS = [
    Mutant("greedy-cap-trim-never-counted", ("VERIFY-003",),
           lambda mp: mp.setattr(reference, "greedy_accept", _greedy_without_cap_trim)),
]

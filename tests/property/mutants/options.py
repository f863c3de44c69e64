"""Passive observers that are not passive: a decision dump that writes into the step's own tensors."""

from dspark import observe

from . import Mutant

_real_decision = observe.decision


def _dump_clamps_candidates(step, rids, candidates, confidence, verify_lens):
    """The dump maps the mask token out of the candidates in place (to index a table without it): the verify then
    reads another anchor."""
    candidates.clamp_(max=max(int(candidates.max()) - 1, 0))
    return _real_decision(step, rids, candidates, confidence, verify_lens)


MUTANTS = [
    Mutant("decision-dump-clamps-candidates", ("OPT-001",),
           lambda mp: mp.setattr(observe, "decision", _dump_clamps_candidates)),
]

"""Generation at the engine's limits: graph cases report their distance to where admission and padding change, and
the runner hands those distances to Hypothesis' target phase (the nightly run's steering)."""

import pytest

from contracts import runner
from contracts.adapters.reference import ReferenceAdapter
from contracts.boundary.graph import GraphCase
from contracts.registry import all_contracts

pytestmark = pytest.mark.cpu

CASE = GraphCase(capture_bs=(1, 2, 4, 8), max_running_requests=6, gamma=1, sample_from_anchor=False, runner="target",
                 local_bs=5, batch_width=2, rank_counts=None, can_run_vote=False)


def test_distances_to_the_captured_sizes_and_past_the_largest():
    # The pool (6) clips the sizes to 1, 2, 4 (6 is added by the runner, not by the case): 5 is 1 from 4, 0 from 5.
    assert CASE.limit_distances() == {"bs to the nearest captured size": 1, "bs to one past the largest size": 0}


def test_the_runner_targets_each_distance(monkeypatch):
    seen = []
    monkeypatch.setattr(runner, "target", lambda value, label: seen.append((label, value)))
    runner.run_contract(all_contracts()["GRAPH-002"], ReferenceAdapter(), profile="ci", max_examples=5)
    labels = {label for label, _ in seen}
    assert labels == {"bs to the nearest captured size", "bs to one past the largest size"}
    assert all(value <= 0 for _, value in seen)  # maximised toward 0: the edge itself

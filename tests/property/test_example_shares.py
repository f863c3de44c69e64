"""A pack's `example_shares` (contracts.budget): the share scales the profile's examples for that contract only, on
both kinds of contract (Hypothesis cases and the decode-loop machine), and a bad declaration fails at load. Its
`draw_shares` do the same for a Monte-Carlo contract's rows, outside `nightly` only."""

import pytest

from contracts import validation
from contracts.adapters.reference import ReferenceAdapter
from contracts.registry import all_contracts
from contracts.runner import run_contract

pytestmark = pytest.mark.cpu


class Counting(ReferenceAdapter):
    def __init__(self, shares, draw_shares=None):
        super().__init__()
        self.example_shares, self.calls, self.steps, self.rows = shares, 0, 0, 0
        if draw_shares is not None:
            self.draw_shares = draw_shares

    def sample_block(self, inputs, seed):
        self.rows += inputs.bs
        return super().sample_block(inputs, seed)

    def greedy_accept(self, inputs):
        self.calls += 1
        return super().greedy_accept(inputs)

    def new_engine(self, spec):
        self.steps += 1
        return super().new_engine(spec)


def _calls(shares, cid, counter, draw_shares=None, profile="ci"):
    engine = Counting(shares, draw_shares)
    run_contract(all_contracts()[cid], engine, profile=profile)
    return getattr(engine, counter)


def test_a_share_scales_the_examples_of_its_contract_only():
    full = _calls({}, "VERIFY-003", "calls")
    quarter = _calls({"VERIFY-003": 0.25}, "VERIFY-003", "calls")
    other = _calls({"VERIFY-004": 0.25}, "VERIFY-003", "calls")
    assert other == full
    # 100 generated examples (+ the pinned one) against 25 (+ 1), whatever Hypothesis adds for its own checks.
    assert quarter <= 0.4 * full, (quarter, full)


def test_a_share_scales_the_decode_loop_machine():
    full = _calls({}, "LOOP-004", "steps")
    half = _calls({"LOOP-004": 0.5}, "LOOP-004", "steps")
    assert half < 0.75 * full, (half, full)


def test_a_draw_share_scales_the_rows_of_its_contract_outside_nightly():
    full = _calls({}, "LOSSLESS-004", "rows")
    assert _calls({}, "LOSSLESS-004", "rows", {"LOSSLESS-004": 0.5}) == full // 2
    assert _calls({}, "LOSSLESS-004", "rows", {"LOSSLESS-003": 0.5}) == full
    assert _calls({}, "LOSSLESS-004", "rows", {"LOSSLESS-004": 0.5}, profile="nightly") == full


@pytest.mark.parametrize("shares, field", [
    ({"VERIFY-003": 0.5}, "draw_shares: VERIFY-003 draws no Monte-Carlo rows"),
    ({"LOSSLESS-004": 0}, "draw_shares['LOSSLESS-004']: expected a share in (0, 1]"),
    ({"LOSSLESS-999": 0.5}, "draw_shares: unknown contract id 'LOSSLESS-999'"),
])
def test_a_bad_draw_share_names_the_field_at_load(shares, field):
    engine = ReferenceAdapter()
    engine.draw_shares = shares
    with pytest.raises(ValueError) as caught:
        validation.validate_adapter(engine)
    assert field in str(caught.value)


@pytest.mark.parametrize("shares, error, field", [
    ({"VERIFY-999": 0.5}, ValueError, "example_shares: unknown contract id 'VERIFY-999'"),
    ({"VERIFY-003": 0}, ValueError, "example_shares['VERIFY-003']: expected a share in (0, 1]"),
    ({"VERIFY-003": 1.5}, ValueError, "example_shares['VERIFY-003']"),
    ({"VERIFY-003": True}, ValueError, "example_shares['VERIFY-003']"),
    ([("VERIFY-003", 0.5)], TypeError, "example_shares: expected a dict"),
])
def test_a_bad_declaration_names_the_field_at_load(shares, error, field):
    engine = ReferenceAdapter()
    engine.example_shares = shares
    with pytest.raises(error) as caught:
        validation.validate_adapter(engine)
    assert field in str(caught.value)

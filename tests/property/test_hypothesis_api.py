"""The runner and the decode-loop machine drive Hypothesis through its documented API only, and keep the
properties the private hooks gave them: each contract's examples stay apart in the example database, each
contract draws its own fixed examples under the derandomized profile, and `machine.seeded` seeds the machine."""

import pathlib

import pytest
from hypothesis import Phase
from hypothesis import strategies as st
from hypothesis.database import InMemoryExampleDatabase

import contracts
from contracts import machine
from contracts.adapters.reference import ReferenceAdapter
from contracts.boundary.engine import EngineSpec
from contracts.checks import expect
from contracts.registry import Contract
from contracts.runner import ContractDatabase, derandomized_seed, run_contract
from contracts.violation import ContractViolation

PRIVATE = ("_hypothesis", "hypothesis.internal", "_current_profile", "inner_test", "hypothesis.core",
           "ConjectureData", "get_state_machine_test")


class _Engine:
    name, version, device, capabilities = "fake", "0", "cpu", ()


def _contract(cid, check, examples=()):
    return Contract(cid, "a test contract", frozenset(), check, cases=lambda: st.integers(0, 100), examples=examples)


class _KeysSeen(InMemoryExampleDatabase):
    def __init__(self):
        super().__init__()
        self.saved = []

    def save(self, key, value):
        self.saved.append(key)
        super().save(key, value)


@pytest.mark.parametrize("path", ["runner.py", "machine.py", "profiles.py", "strategies"])
def test_no_private_hypothesis_names(path):
    root = pathlib.Path(contracts.__file__).parent / path
    for file in [root] if root.is_file() else sorted(root.glob("*.py")):
        text = file.read_text()
        assert not [name for name in PRIVATE if name in text], file


def test_a_contract_replays_only_its_own_failures():
    """Every contract runs the same test function, so Hypothesis keys all of them alike; the runner's database
    wrapper keeps them apart: a contract's failure is saved under its own id and replayed by it alone."""
    db = _KeysSeen()

    def fails_from_50(engine, case):
        expect(case < 50, "case", "< 50", case)

    seen = []
    failing = _contract("TEST-001", fails_from_50)
    other = _contract("TEST-002", lambda engine, case: seen.append(case), examples=(7,))  # its own pinned case
    with pytest.raises(ContractViolation) as first:
        run_contract(failing, _Engine(), profile="ci", database=db, derandomize=False, max_examples=200)
    assert first.value.case == 50  # shrunk
    assert db.saved and all(key.startswith(b"TEST-001\x00") for key in db.saved)

    reuse = dict(database=db, phases=[Phase.explicit, Phase.reuse], derandomize=False)
    run_contract(other, _Engine(), profile="ci", **reuse)
    assert seen == [7]  # its pinned case, and nothing of TEST-001's
    with pytest.raises(ContractViolation) as again:
        run_contract(failing, _Engine(), profile="ci", **reuse)  # from the database alone
    assert again.value.case == 50


def test_the_wrapper_is_an_ordinary_database():
    inner = InMemoryExampleDatabase()
    a, b = ContractDatabase(inner, "TEST-001"), ContractDatabase(inner, "TEST-002")
    a.save(b"k", b"1")
    a.save(b"k", b"2")
    b.save(b"k", b"3")
    a.move(b"k", b"m", b"2")
    a.delete(b"k", b"3")  # not a's: nothing happens
    assert sorted(a.fetch(b"k")) == [b"1"] and sorted(a.fetch(b"m")) == [b"2"] and sorted(b.fetch(b"k")) == [b"3"]
    assert a == ContractDatabase(inner, "TEST-001") and a != b


def _draws(cid, profile="ci", **settings):
    seen = []
    run_contract(_contract(cid, lambda engine, case: seen.append(case)), _Engine(), profile=profile, max_examples=20,
                 **settings)
    return seen


def test_derandomized_contracts_draw_their_own_fixed_examples():
    assert _draws("TEST-001") == _draws("TEST-001")  # the ci profile: the same examples every run
    assert _draws("TEST-001") != _draws("TEST-002")  # but not the same for two contracts with one strategy
    assert _draws("TEST-001", seed=5) == _draws("TEST-002", seed=5)  # an explicit seed is the seed
    assert derandomized_seed("TEST-001") != derandomized_seed("TEST-002")


def test_derandomized_seeds_are_pinned():
    """The seeds are the ones `derandomize` gave the contracts before (the examples CI draws, which the engine
    findings were found with): a change here changes every contract's examples."""
    assert derandomized_seed("VERIFY-001") % 2**64 == 0xA63B985AEA78EEA8


class _Recording(ReferenceAdapter):
    """The reference adapter, recording the engine configurations the machine draws."""

    def __init__(self):
        super().__init__()
        self.specs = []

    def new_engine(self, spec):
        self.specs.append(spec)
        return super().new_engine(spec)


SPECS = st.sampled_from([EngineSpec(vocab_size=5, gamma=g, drafter="vanilla", verify_mode="static", capture_bs=None)
                         for g in range(1, 9)])


def _machine_programs(seed):
    engine = _Recording()
    with machine.seeded(seed) as runs:
        machine.run_decode_loop(engine, ("progress",), specs=SPECS, max_examples=4, steps=2)
    assert runs == [seed]
    return engine.specs


def test_a_seeded_machine_replays_its_programs():
    first = _machine_programs(11)
    assert len(first) >= 4
    assert _machine_programs(11) == first
    assert any(_machine_programs(s) != first for s in (12, 13))



def test_derandomized_over_a_profile_with_a_database():
    """`derandomize=True` over a profile that has a database runs without one (as Hypothesis has it: derandomize
    implies database=None), from the contract's own fixed seed."""
    assert _draws("TEST-001", profile="dev", derandomize=True) == _draws("TEST-001")

"""An exception raised in the harness's own code (a contract, a strategy, the runner) is a harness error: its own
result, exit 1, its traceback kept; never the engine's violation. An engine's exception (its package, its adapter, a
user's pack) stays a violation, reported with the engine's frame that raised it."""

import json
import textwrap

import pytest
import torch

from contracts.report import HARNESS_ERROR, HARNESS_KEYS, ContractTable
from contracts.violation import ContractViolation, HarnessError, harness_error, raising_frame
from tests import inprocess

# The issue's example: an adapter that drops the bonus token. VERIFY-004's own loop then indexes an empty list.
PACKS = textwrap.dedent("""
    from contracts.adapters.reference import ReferenceAdapter
    from contracts.boundary.verify import CommitResult

    class DropsBonus(ReferenceAdapter):
        name = "drops-bonus"
        def finalize(self, inputs, accept):
            r = super().finalize(inputs, accept)
            return CommitResult(r.commit_len - 1, r.new_seq_lens - 1, r.out_tokens)

    class Crashing(ReferenceAdapter):
        name = "crashing"
        def scale_rank_counts(self, counts, logprob_counts, width, logprob_width):
            return self._scale(counts)
        def _scale(self, counts):
            raise RuntimeError("engine bug")
""")


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("packs")
    (tmp / "i24_packs.py").write_text(PACKS)
    return tmp


def _check(packs, engine, cid, tmp_path):
    out = tmp_path / "r.json"
    p = inprocess.check("--engine", f"i24_packs:{engine}", "--contract", cid, "--json", str(out),
                        env={"CI": "true"}, path=[packs])
    return p, {r["id"]: r for r in json.loads(out.read_text())["contracts"]}


def test_a_crash_in_the_contracts_own_code_is_a_harness_error(packs, tmp_path):
    p, rows = _check(packs, "DropsBonus", "VERIFY-004", tmp_path)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr
    row = rows["VERIFY-004"]
    assert row["result"] == HARNESS_ERROR and row["failure"] is None, row
    assert "IndexError" in row["detail"] and "contracts/catalog/verify.py" in row["detail"], row["detail"]
    assert "Traceback" in row["traceback"] and "contracts/catalog/verify.py" in row["traceback"]
    assert "harness error(s)" in p.stderr and "VERIFY-004" in p.stderr
    assert "expected no exception" not in p.stdout  # not read as the engine's violation
    assert "1 harness errors" in p.stdout


def test_an_engine_crash_stays_a_violation_with_the_engines_frame(packs, tmp_path):
    p, rows = _check(packs, "Crashing", "SCALE-001", tmp_path)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr
    row = rows["SCALE-001"]
    assert row["result"] == "failed" and row["failure"]["field"] == "call", row
    assert row["failure"]["observed"] == "RuntimeError: engine bug"  # unchanged: the ledgers match on it
    assert row["failure"]["where"].startswith("i24_packs.py:") and row["failure"]["where"].endswith("in _scale")
    assert "raised at: i24_packs.py:" in p.stdout


def _raise_in_torch():
    torch.zeros(2)[5]  # IndexError raised inside torch, called from this (harness-side) frame


def test_the_raising_frame_skips_libraries_and_blames_their_caller():
    try:
        _raise_in_torch()
    except IndexError as e:
        side, where = raising_frame(e)
    # This test module is outside contracts/, so it counts as the engine's side, like a user's pack.
    assert side == "engine" and "test_harness_errors.py" in where and "_raise_in_torch" in where
    from contracts.boundary.verify import CommitResult

    try:
        exec(compile("CommitResult(None)", "contracts/catalog/fake.py", "exec"), {"__name__": "contracts.catalog.fake",
                                                                                  "CommitResult": CommitResult})
    except TypeError as e:
        side, where = raising_frame(e)
    assert side == "harness" and where.startswith("contracts/catalog/fake.py:1"), where


def test_an_adapter_frame_is_the_engines_side():
    code = compile("def f():\n    raise ValueError('x')\n", "contracts/adapters/fake.py", "exec")
    scope = {"__name__": "contracts.adapters.fake"}
    exec(code, scope)
    try:
        scope["f"]()
    except ValueError as e:
        assert raising_frame(e)[0] == "engine"
    scope["__name__"] = "contracts.strategies.fake"
    exec(code, scope)
    try:
        scope["f"]()
    except ValueError as e:
        assert raising_frame(e)[0] == "harness"


def test_any_exception_without_a_violation_is_a_harness_error():
    """One raised outside the contract's call (a strategy drawing a case) reaches the plugin as it is."""
    error = harness_error("X-001", KeyError("k"))
    assert isinstance(error, HarnessError) and "KeyError" in str(error)
    violation = ContractViolation("X-001", "e", "s", "f", 1, 2)
    assert harness_error("X-001", violation) is None
    wrapped = HarnessError("X-001", ValueError("v"))
    assert harness_error("X-001", ExceptionGroup("g", [wrapped])) is wrapped


def test_a_harness_error_outranks_the_other_results_and_keeps_its_traceback():
    from contracts.registry import all_contracts

    contract = all_contracts()["SCALE-001"]
    table = ContractTable("reference")
    table.record(contract, "passed", 0.1)
    table.record(contract, HARNESS_ERROR, 0.1, "boom", {HARNESS_KEYS[1]: "Traceback ..."})
    row = table.rows["SCALE-001"]
    assert (row.result, row.detail, row.traceback) == (HARNESS_ERROR, "boom", "Traceback ...")
    assert table.counts()[HARNESS_ERROR] == 1
    from contracts.cli import FAILED, exit_code

    code, message = exit_code(table.as_dict())
    assert code == FAILED and "harness error" in message


class _LeavesPlaceholder:
    """An engine whose finalize leaves -1 where the bonus belongs: its own bad output, not the harness's."""

    @staticmethod
    def make():
        from contracts.adapters.reference import ReferenceAdapter
        from contracts.boundary.verify import CommitResult

        class LeavesPlaceholder(ReferenceAdapter):
            name = "leaves-placeholder"

            def finalize(self, inputs, accept):
                r = super().finalize(inputs, accept)
                out = r.out_tokens.clone()
                out[torch.arange(out.shape[0]), r.commit_len - 1] = -1
                return CommitResult(r.commit_len, r.new_seq_lens, out)

        return LeavesPlaceholder()


@pytest.mark.parametrize("cid", ["LOSSLESS-003", "LOSSLESS-004", "LOSSLESS-005", "LOSSLESS-006"])
def test_an_out_of_range_committed_token_is_the_engines_violation_naming_it(cid):
    from contracts.registry import all_contracts
    from contracts.runner import violation_of

    v = violation_of(all_contracts()[cid], _LeavesPlaceholder.make())  # not a HarnessError (a bincount crash)
    assert "out_tokens[" in v.what and "within commit_len" in v.what, v.what
    assert v.expected.startswith("a token id in [0, ") and str(v.observed).startswith("-1 "), v


def test_the_last_line_names_every_failure_and_every_harness_error():
    from contracts.cli import FAILED, exit_code

    rows = [{"id": "LOSSLESS-003", "result": HARNESS_ERROR}, {"id": "VERIFY-001", "result": "failed"},
            {"id": "VERIFY-002", "result": "failed"}, {"id": "VERIFY-003", "result": "passed"}]
    counts = {"failed": 2, "passed": 1, "skipped": 0, "known-failure": 0}
    code, message = exit_code({"contracts": rows, "counts": counts, "engine": "x"})
    assert code == FAILED
    assert "2 contract(s) failed: VERIFY-001, VERIFY-002" in message and "1 harness error(s)" in message, message
    assert "LOSSLESS-003" in message, message

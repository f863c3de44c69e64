"""`check`'s table on a terminal: one line per known failure (its evidence in the JSON, the HTML and --verbose),
skipped contracts summarised per missing capability, columns sized to their content, warnings counted after the table
(--show-engine-warnings prints them), and a real engine's table within 140 columns."""

import re
import textwrap

import pytest

from contracts.adapters.sglang import SGLangAdapter  # the pack class only: SGLang itself is not imported
from contracts.adapters.vllm import VLLMAdapter
from contracts.registry import all_contracts
from contracts.report import ContractTable
from contracts.table_text import WIDTH, id_ranges
from tests import inprocess

CONTRACTS = all_contracts()
_EVIDENCE = "known failure (evidence: " + "the planner serves a cached verify-all layout before it reads the budget " * 3 + ")"


def _props(name, capabilities, **failure):
    props = {"dspark_engine": name, "dspark_engine_name": name, "dspark_engine_spec": name, "dspark_engine_version": "1.0",
             "dspark_engine_device": "cpu", "dspark_engine_capabilities": ",".join(sorted(capabilities)),
             "dspark_engine_backend": "", "dspark_engine_tested_versions": '["1.0"]'}
    props.update({f"dspark_{k}": v for k, v in failure.items()})
    return props


def _pack_table(pack) -> ContractTable:
    """Every contract as `check` would record it on `pack`: skipped without a capability, the ledger's entries known
    (with long evidence and a long repro line), the rest passed."""
    caps = set(pack.capabilities)
    known = {e.contract_id for e in getattr(pack, "known_failures", ())}
    table = ContractTable(pack.name)
    for c in CONTRACTS.values():
        props = _props(pack.name, caps)
        if c.requires - caps:
            table.record(c, "skipped", 0.0, f"Skipped: engine {pack.name} lacks capability {', '.join(sorted(c.requires - caps))}", props)
        elif c.id in known:
            props.update(_props(pack.name, caps, field="sum(L - 1)", expected="<= 0", observed="1", case="PlanCase(...)",
                                repro="python -c \"" + "x" * 300 + "\"", message=f"{c.id} [engine=x]: ..."))
            table.record(c, "known-failure", 12.3, _EVIDENCE, props)
        else:
            table.record(c, "passed", 123.4, "", props)
    table.hypothesis = {"profile": "ci", "derandomize": True, "max_examples": 100}
    return table


@pytest.mark.parametrize("pack", [SGLangAdapter, VLLMAdapter], ids=lambda p: p.name)
def test_a_real_engines_table_fits_140_columns(pack):
    table = _pack_table(pack)
    lines = table.lines(version_line=True)
    assert all(len(line) <= WIDTH for line in lines), max(lines, key=len)
    known = [r for r in table.rows.values() if r.result == "known-failure"]
    assert known and not any("evidence" in line for line in lines)  # one line each: the evidence is elsewhere
    for r in known:
        assert sum(line.startswith(r.id + " ") for line in lines) == 1
    verbose = table.lines(verbose=True)
    assert all(_EVIDENCE[:40] in "\n".join(verbose) for _ in known) and any("repro: python -c" in x for x in verbose)
    assert all(len(line) <= WIDTH for line in verbose if "repro: " not in line)  # a repro line is a command: whole


def test_skipped_contracts_are_one_line_per_missing_capability():
    table = _pack_table(SGLangAdapter)
    lines = table.lines()
    skipped = [r for r in table.rows.values() if r.result == "skipped"]
    assert skipped and not any(line.startswith(r.id + " ") for r in skipped for line in lines)
    summary = [line for line in lines if line.startswith("  lacks ")]
    missing = {", ".join(sorted(set(r.requires) - SGLangAdapter.capabilities)) for r in skipped}
    assert sorted(re.match(r"  lacks (.*) \(\d+\): ", line).group(1) for line in summary) == sorted(missing)
    text = " ".join(lines)
    for r in skipped:  # every skipped id is covered, alone or in a range
        assert r.id in text or any(_in_range(r.id, m) for m in re.findall(r"[A-Z]+-\d+\.\.\d+", text)), r.id


def _in_range(cid, rng):
    first, last = rng.split("..")
    prefix, lo = first.rsplit("-", 1)
    p, n = cid.rsplit("-", 1)
    return p == prefix and int(lo) <= int(n) <= int(last)


def test_id_ranges():
    assert id_ranges(["LOOP-003", "LOOP-001", "LOOP-002", "LOOP-005", "PLAN-010"]) == "LOOP-001..003, LOOP-005, PLAN-010"
    assert id_ranges(["A-1"]) == "A-1" and id_ranges([]) == ""


def test_columns_are_sized_to_their_content():
    table = ContractTable("e")
    table.record(CONTRACTS["SCALE-001"], "passed", 0.5, "", _props("e", {"dp-metadata"}))
    header, row = table.lines()[1:3]
    assert header.startswith("contract   result  time  statement") and row.startswith("SCALE-001  passed  0.5s  ")
    table.record(CONTRACTS["DPSYNC-001"], "known-failure", 10.25, "ev", _props("e", {"dp-metadata"}))
    header = table.lines()[1]
    assert header.startswith("contract    result          time  statement"), header


def test_warnings_are_counted_after_the_table_and_shown_on_request():
    table = ContractTable("e")
    table.record(CONTRACTS["SCALE-001"], "passed", 0.5, "", _props("e", {"dp-metadata"}))
    for _ in range(3):
        table.note_warning("UserWarning", "Only CUDA supports AWQ", "awq.py:53")
    table.note_warning("DeprecationWarning", "old\nsecond line", "x.py:1")
    lines = table.lines()
    assert lines[-1].startswith("warnings: 4 raised while the contracts ran (2 distinct); --show-engine-warnings")
    shown = table.lines(show_warnings=True)
    assert "  3x UserWarning at awq.py:53:" in shown and "    second line" in shown
    assert table.as_dict()["warnings"][0] == {"category": "UserWarning", "message": "Only CUDA supports AWQ",
                                               "where": "awq.py:53", "count": 3}


WARNS = textwrap.dedent("""
    import warnings
    from contracts.adapters.reference import ReferenceAdapter
    warnings.warn("loading the warning engine", UserWarning)
    class Warns(ReferenceAdapter):
        name = "warns"
        def scale_rank_counts(self, counts, logprob_counts, width, logprob_width):
            warnings.warn("scaling is deprecated here", DeprecationWarning)
            return super().scale_rank_counts(counts, logprob_counts, width, logprob_width)
""")


@pytest.mark.e2e
def test_check_counts_engine_warnings_and_prints_them_with_the_flag(tmp_path):
    (tmp_path / "warns_engine.py").write_text(WARNS)
    args = ("--engine", "warns_engine:Warns", "--contract", "SCALE-001", "--profile", "ci")
    p = inprocess.check(*args, env={"CI": "true"}, path=[tmp_path])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr
    line = next(x for x in p.stdout.splitlines() if x.startswith("warnings: "))
    assert re.match(r"warnings: \d+ raised while the contracts ran \(2 distinct\); --show-engine-warnings", line), line
    assert "warnings summary" not in p.stdout and "scaling is deprecated here" not in p.stdout
    p = inprocess.check(*args, "--show-engine-warnings", env={"CI": "true"}, path=[tmp_path])
    assert "    scaling is deprecated here" in p.stdout and "    loading the warning engine" in p.stdout, p.stdout[-2000:]


@pytest.mark.parametrize("width", [100, 200])
def test_the_table_fits_the_terminal_it_is_given(width):
    table = _pack_table(SGLangAdapter)
    lines = table.lines(width=width)
    assert all(len(line) <= width for line in lines), max(lines, key=len)
    row = next(line for line in lines if line.startswith("HANDOFF-001 "))
    statement = CONTRACTS["HANDOFF-001"].statement
    assert len(row) == min(width, len(row.split(statement[:20])[0]) + len(statement)), row  # cut only at the width


def test_a_brief_table_lists_only_the_rows_to_read():
    table = _pack_table(SGLangAdapter)
    lines = table.lines(brief=True)
    known = {r.id for r in table.rows.values() if r.result == "known-failure"}
    listed = {line.split()[0] for line in lines if re.match(r"[A-Z]+-\d{3} ", line)}
    assert listed == known, listed ^ known
    assert any("passed contracts not listed here" in line for line in lines)


@pytest.mark.parametrize("hypothesis, text", [
    ({"profile": "dev", "derandomize": False, "max_examples": 50, "seed": None}, "(random seed, max_examples=50)"),
    ({"profile": "dev", "derandomize": False, "max_examples": 50, "seed": "7"}, "(seed=7, max_examples=50)"),
    ({"profile": "ci", "derandomize": True, "max_examples": 100}, "(derandomized, max_examples=100)")])
def test_the_hypothesis_line_never_prints_seed_none(hypothesis, text):
    table = _pack_table(SGLangAdapter)
    table.hypothesis = hypothesis
    line = next(x for x in table.lines() if x.startswith("hypothesis: "))
    assert line.endswith(text) and "None" not in line, line

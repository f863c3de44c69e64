"""Hardening is a class apart: a contract whose inputs the engine's own producers never emit is listed under its own
heading, not run and never failing the check by default; `--hardening` runs it (and then its failure fails)."""

import json

from contracts.cli import main

_PACK = '''
import dspark.spec_info as si
from contracts.adapters.reference import ReferenceAdapter


class Hardened(ReferenceAdapter):
    name = "hardened"
    hardening = {"SCALE-001": "no producer of this engine sends such counts"}

    def scale_rank_counts(self, counts, logprob_counts, width, logprob_width):  # broken: one token too many each
        scaled, logprob = super().scale_rank_counts(counts, logprob_counts, width, logprob_width)
        return [c + 1 for c in scaled], logprob
'''


def _run(tmp_path, monkeypatch, *extra):
    (tmp_path / "hardened_pack.py").write_text(_PACK)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run.json"
    code = main(["check", "--engine", "hardened_pack:Hardened", "--contract", "SCALE-001", "--contract", "PLAN-001",
                 "--json", str(out), *extra])
    return code, json.loads(out.read_text())


def test_hardening_is_listed_apart_and_not_run_by_default(tmp_path, monkeypatch, capsys):
    code, data = _run(tmp_path, monkeypatch)
    assert code == 0
    rows = {r["id"]: r for r in data["contracts"]}
    assert rows["SCALE-001"]["result"] == "hardening"
    assert rows["SCALE-001"]["hardening"] == "no producer of this engine sends such counts"
    assert rows["PLAN-001"]["result"] == "passed" and rows["PLAN-001"]["hardening"] == ""
    assert data["counts"]["hardening"] == 1 and data["counts"]["failed"] == 0
    text = capsys.readouterr().out
    heading = text.index("hardening (inputs this engine's own producers never emit")
    assert text.index("PLAN-001") < heading < text.index("SCALE-001  hardening")


def test_hardening_runs_with_the_flag_and_its_failure_fails(tmp_path, monkeypatch):
    code, data = _run(tmp_path, monkeypatch, "--hardening")
    assert code == 1
    row = {r["id"]: r for r in data["contracts"]}["SCALE-001"]
    assert row["result"] == "failed" and row["hardening"], row


_LEDGERED = _PACK + '''
from contracts.ledger import Finding, KnownFailure


def _unrelated_fix(mp):  # a finding's correction elsewhere in the engine: it does not touch count scaling
    pass


class Ledgered(Hardened):
    name = "ledgered"
    known_failures = (
        KnownFailure("ledgered", ">=0", "SCALE-001", r"", "evidence: the engine scales counts one too high"),
        KnownFailure("ledgered", ">=0", "PLAN-002", r"", "evidence: an unrelated finding",
                     finding=Finding("not found (searched: nothing)", "x.py:1", "wasted work", "findings/x/y.py",
                                     correction=_unrelated_fix)),
    )
'''


def test_a_ledgered_hardening_failure_is_known_not_blamed_on_the_corrections(tmp_path, monkeypatch):
    """With --hardening, a hardening contract the ledger records fails as known: it has no correction to check, so
    the other findings' corrections are not re-run against it (they would leave it failing and call that new)."""
    (tmp_path / "ledgered_pack.py").write_text(_LEDGERED)  # its own module name: hardened_pack may be imported already
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run.json"
    code = main(["check", "--engine", "ledgered_pack:Ledgered", "--contract", "SCALE-001", "--hardening",
                 "--json", str(out)])
    row = {r["id"]: r for r in json.loads(out.read_text())["contracts"]}["SCALE-001"]
    assert (code, row["result"]) == (0, "known-failure"), row

"""`dspark-contracts report`: two real checks merged into one conformance matrix (engines as columns, contracts as
rows), written as JSON and as the page; a known failure links to its finding's repro and draft report, a skipped
cell names the capability, the JSON reads back into the same matrix and page, and a bad input writes nothing."""

import json
import re
import textwrap
from html.parser import HTMLParser
from pathlib import Path

import pytest

from contracts import __version__, cli, conformance
from tests import inprocess

pytestmark = pytest.mark.cpu

# Counts doubled, as in test_report_json_html, but listed in the pack's own ledger with a finding: SCALE-001 is a
# known failure. No ranks level: RANKS-001 is skipped. It says it accepts `seed`, which no contract draws.
PACK = textwrap.dedent("""
    from contracts.adapters.reference import ReferenceAdapter
    from contracts.ledger import Finding, KnownFailure

    class Known(ReferenceAdapter):
        name = "known"
        capabilities = ReferenceAdapter.capabilities - {"ranks"}
        accepted_parameters = ReferenceAdapter.accepted_parameters + ("seed",)
        known_failures = (KnownFailure("known", ">=0", "SCALE-001", "^scaled counts$", "evidence: doubled on purpose",
                                       finding=Finding(status="not found (searched: nothing)", path="rank_counts.py:1",
                                                       severity="wrong outputs", repro="findings/known/scale_001.py")),)

        def scale_rank_counts(self, counts, logprob_counts, width, logprob_width):
            scaled, logprob = super().scale_rank_counts(counts, logprob_counts, width, logprob_width)
            return [2 * x for x in scaled], logprob
""")
# The checkout the report reads (conformance.ROOT): the engine's docs page and its finding's files.
DOCS = textwrap.dedent("""
    # The known engine

    ## Install and run

    ```bash
    pip install known-engine==1.0 \\
      && bash scripts/install_known.sh
    dspark-contracts check --engine known_pack:Known
    ```

    ## Findings
""")
KNOWN, REFERENCE = "known (known_pack:Known) 0.1.0", "reference 0.1.0"
CONTRACTS = ("SCALE-001", "DPSYNC-001", "RANKS-001")


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkout")
    (root / "docs" / "engines").mkdir(parents=True)
    (root / "docs" / "engines" / "known.md").write_text(DOCS)
    (root / "findings" / "known").mkdir(parents=True)
    for suffix in (".py", ".md"):
        (root / "findings" / "known" / f"scale_001{suffix}").write_text("# the finding\n")
    (root / "pack").mkdir()
    (root / "pack" / "known_pack.py").write_text(PACK)
    return root


@pytest.fixture(scope="module")
def runs(checkout):
    """Two checks, in this process: the known pack (a known failure, a skip) and the reference (RANKS-001 not run)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(conformance, "ROOT", checkout)
        argv = [a for cid in CONTRACTS for a in ("--contract", cid)]
        known = inprocess.check("--engine", "known_pack:Known", *argv, "--json", str(checkout / "known.json"),
                                env={"CI": "true"}, path=[checkout / "pack"])
        assert known.returncode == 0, known.stdout + known.stderr
        reference = inprocess.check(*argv[:4], "--json", str(checkout / "reference.json"), env={"CI": "true"})
        assert reference.returncode == 0, reference.stdout + reference.stderr
    return checkout / "known.json", checkout / "reference.json"


@pytest.fixture
def report(checkout, monkeypatch):
    monkeypatch.setattr(conformance, "ROOT", checkout)

    def run(*argv):
        return cli.main(["report", *map(str, argv)])
    return run


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a":
            self.hrefs.append(attrs["href"])


def test_check_json_carries_date_harness_version_and_the_finding(runs):
    known = json.loads(runs[0].read_text())
    assert known["harness_version"] == __version__
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", known["date"]), known["date"]
    rows = {r["id"]: r for r in known["contracts"]}
    assert rows["SCALE-001"]["result"] == "known-failure"
    assert rows["SCALE-001"]["finding"] == {"repro": "findings/known/scale_001.py", "report": "findings/known/scale_001.md",
                                            "status": "not found (searched: nothing)", "path": "rank_counts.py:1",
                                            "severity": "wrong outputs"}
    assert "finding" not in rows["DPSYNC-001"]  # only a known failure has one


def test_two_runs_merge_into_engines_by_contracts(runs, report, checkout, capsys):
    out = checkout / "out"
    out.mkdir(exist_ok=True)
    assert report(*runs, "--html", out / "page.html", "--json", out / "matrix.json") == 0
    assert f"wrote {out / 'matrix.json'} (2 engine(s): {KNOWN}, {REFERENCE})" in capsys.readouterr().out
    matrix = json.loads((out / "matrix.json").read_text())
    assert matrix["format"] == conformance.FORMAT and [e["column"] for e in matrix["engines"]] == [KNOWN, REFERENCE]
    known, reference = matrix["engines"]
    for engine in (known, reference):
        assert engine["harness_version"] == __version__ and engine["date"] and engine["engine_version_line"]
    assert known["install"] == {"doc": "docs/engines/known.md",
                                "command": "pip install known-engine==1.0 && bash scripts/install_known.sh"}
    assert reference["install"] is None  # this checkout has no page for it
    assert known["unexercised_parameters"] == ["seed"] and known["source"] == str(runs[0])
    cells = {c["id"]: c["cells"] for c in matrix["contracts"]}
    assert sorted(cells) == sorted(CONTRACTS)
    assert {cid: {k: (v or {}).get("result") for k, v in row.items()} for cid, row in cells.items()} == {
        "SCALE-001": {KNOWN: "known-failure", REFERENCE: "passed"},
        "DPSYNC-001": {KNOWN: "passed", REFERENCE: "passed"},
        "RANKS-001": {KNOWN: "skipped", REFERENCE: None}}  # not run on the reference
    assert cells["RANKS-001"][KNOWN]["missing"] == ["ranks"]
    assert cells["SCALE-001"][KNOWN]["finding"]["report"] == "findings/known/scale_001.md"


def test_the_page_links_each_known_failure_to_files_that_exist(runs, report, checkout):
    out = checkout / "deep" / "artifacts"
    out.mkdir(parents=True, exist_ok=True)
    assert report(*runs, "--html", out / "page.html") == 0
    text = (out / "page.html").read_text()
    cell = re.search(r'<td class="known-failure"[^>]*>(.*?)</td>', text).group(1)
    assert ('<span class="finding"><a href="../../findings/known/scale_001.py">repro</a> '
            '<a href="../../findings/known/scale_001.md">report</a></span>') in cell, cell
    links = _Links()
    links.feed(text)
    outside = [h for h in links.hrefs if not h.startswith("#")]
    assert sorted(set(outside)) == ["../../docs/engines/known.md", "../../findings/known/scale_001.md",
                                    "../../findings/known/scale_001.py"]
    assert all((out / h).resolve().is_file() for h in outside)
    assert all(h[1:] in links.ids for h in links.hrefs if h.startswith("#"))
    assert re.findall(r'<td class="skipped"[^>]*>.*?<span class="why">([^<]*)</span></td>', text) == ["lacks ranks"]
    for shown in ("pip install known-engine==1.0 &amp;&amp; bash scripts/install_known.sh", "dspark-contracts " + __version__,
                  '<span class="gap">seed</span>', "not found (searched: nothing)"):
        assert shown in text, shown
    assert report(*runs, "--html", out / "web.html", "--link-base", "https://example.org/repo/blob/abc/") == 0
    assert '<a href="https://example.org/repo/blob/abc/findings/known/scale_001.py">repro</a>' in (out / "web.html").read_text()


def test_the_json_reads_back_into_the_same_matrix_and_page(runs, report, checkout):
    out = checkout / "trip"
    out.mkdir(exist_ok=True)
    assert report(*runs, "--json", out / "m1.json", "--html", out / "p1.html") == 0
    assert report(out / "m1.json", "--json", out / "m2.json", "--html", out / "p2.html") == 0
    first, second = (json.loads((out / f"m{i}.json").read_text()) for i in (1, 2))
    assert first.pop("date") and second.pop("date")
    assert second == first
    dates = [json.loads((out / f"m{i}.json").read_text())["date"] for i in (1, 2)]
    assert (out / "p2.html").read_text().replace(dates[1], dates[0]) == (out / "p1.html").read_text()


def test_a_run_written_without_findings_gets_them_from_its_pack(runs, report, checkout, monkeypatch):
    old = json.loads(runs[0].read_text())
    for row in old["contracts"]:
        row.pop("finding", None)
    path = checkout / "old.json"
    path.write_text(json.dumps(old))
    monkeypatch.chdir(checkout / "pack")  # a module:factory pack is imported from the current directory, as by check
    assert report(path, "--json", checkout / "old-matrix.json") == 0
    cells = {c["id"]: c["cells"] for c in json.loads((checkout / "old-matrix.json").read_text())["contracts"]}
    assert cells["SCALE-001"][KNOWN]["finding"]["repro"] == "findings/known/scale_001.py"


def _bad(tmp: Path):
    good = {"engine": "e", "contracts": [{"id": "SCALE-001", "result": "passed"}]}
    docs = {"list.json": ("[]", "the document is a JSON list, not an object"),
            "runs.json": ('{"runs": []}', "no field 'engine'"),
            "rows.json": (json.dumps({**good, "contracts": {}}), "field 'contracts' is a dict, expected a list"),
            "result.json": (json.dumps({**good, "contracts": [{"id": "X", "result": "ok"}]}),
                            "contracts[0].result: 'ok' is not one of"),
            "noid.json": (json.dumps({**good, "contracts": [{"result": "passed"}]}), "contracts[0].id: missing"),
            "matrix.json": (json.dumps({"format": conformance.FORMAT, "engines": [{"column": "a"}],
                                        "contracts": [{"id": "X", "cells": {"b": None}}]}),
                            "contracts[0].cells: 'b' is no column of 'engines'"),
            "text.json": ("not json", "not JSON")}
    for name, (text, _) in docs.items():
        (tmp / name).write_text(text)
    (tmp / "good.json").write_text(json.dumps(good))
    return [(name, problem) for name, (_, problem) in docs.items()] + [("missing.json", "no such file")]


def test_a_bad_input_is_named_and_nothing_is_written(report, tmp_path, capsys):
    outputs = (tmp_path / "page.html", tmp_path / "m.json")
    for name, problem in _bad(tmp_path):
        # After a good file: the good one is read, the bad one stops the report before either output is written.
        code = report(tmp_path / "good.json", tmp_path / name, "--html", outputs[0], "--json", outputs[1])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith(f"dspark-contracts: {tmp_path / name}: ") and problem in err, (name, err)
        assert not any(p.exists() for p in outputs), name
    assert report(tmp_path / "good.json") == 2 and "nothing to write" in capsys.readouterr().err
    assert report(tmp_path / "good.json", "--json", tmp_path / "no" / "m.json") == 2
    assert "--json: the folder" in capsys.readouterr().err and not outputs[0].exists()


def test_the_install_line_of_each_engine_page():
    """Read from this checkout's docs/engines pages: the engine's own page, or the one that names it."""
    lines = {name: conformance.install_line(name) for name in ("reference", "sglang-chain", "vllm-dspark-block", "deepspec")}
    assert lines["reference"] == {"doc": "docs/engines/reference.md",
                                  "command": "pip install torch==2.13.0 && pip install -e . && dspark-contracts check"}
    assert lines["sglang-chain"]["doc"] == "docs/engines/sglang.md"
    assert lines["sglang-chain"]["command"].endswith("bash scripts/install_sglang.sh && dspark-contracts check --engine sglang")
    assert lines["vllm-dspark-block"]["doc"] == "docs/engines/vllm-dspark.md"
    assert lines["vllm-dspark-block"]["command"].splitlines()[-1].endswith("bash scripts/install_vllm_dspark.sh")
    deepspec = lines["deepspec"]["command"].splitlines()
    assert deepspec[0].startswith("git clone ") and deepspec[-1].endswith("bash scripts/install_deepspec.sh")
    assert conformance.install_line("no-such-engine") is None


def test_ci_writes_every_engine_check_into_its_conformance_report():
    """Each check step of .ci/run but the README's main job writes its JSON where the last step merges it from."""
    from tests.property.test_readme_commands import ROOT, _ci_steps

    steps = _ci_steps()
    text = (ROOT / ".ci" / "run").read_text()
    merged = re.search(r"^REPORT_RUNS=\(([^)]*)\)$", text, re.M).group(1).split()
    written = {}
    for name, command in steps.items():
        if " check" in command and "dspark-contracts" in command and name != "main job":
            found = re.findall(r'--json "\$REPORT_DIR/([\w-]+)\.json"', command)
            assert len(found) == 1, f".ci/run step {name!r} writes no JSON for the conformance report: {command}"
            written[name] = found[0]
    assert sorted(written.values()) == sorted(merged) and len(set(merged)) == len(merged), (written, merged)
    assert list(steps)[-1] == "conformance report"
    assert steps["conformance report"].startswith("with_runs dspark-contracts report --html")
    assert "dspark-contracts check'" in steps["main job"] and "--json" not in steps["main job"]  # the README's words

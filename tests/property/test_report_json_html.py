"""What `check` reports about a failing engine: JSON, JUnit XML, progress lines, the HTML page (parsed, and in a browser).
The check runs in this process (`tests.inprocess`; its xdist worker in a new one); its repro line as a user pastes it."""

import json
import re
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from contracts import cli
from contracts.html_report import bar_chart, render
from tests import inprocess
from tests.hermetic import clean_env

ROOT = Path(__file__).resolve().parents[2]
# Counts scaled twice: SCALE-001 fails with a shrunk case; no ranks level, so RANKS-001 is skipped.
DOUBLING = textwrap.dedent("""
    from contracts.adapters.reference import ReferenceAdapter
    class Doubling(ReferenceAdapter):
        name = "doubling"
        capabilities = ReferenceAdapter.capabilities - {"ranks"}
        def scale_rank_counts(self, counts, logprob_counts, width, logprob_width):
            scaled, logprob = super().scale_rank_counts(counts, logprob_counts, width, logprob_width)
            return [2 * x for x in scaled], logprob
""")
LABEL = "doubling (bad_engine:Doubling)"


def _version() -> str:
    # Imported late: a top-level `import dspark` here changes which dspark modules pytester's sys.modules
    # snapshot keeps, and test_ledger's module-level mutation then patches a module the engine no longer uses.
    import dspark

    return dspark.__version__
CONTRACTS = ("SCALE-001", "DPSYNC-001", "RANKS-001")


def _env(tmp):
    return clean_env(PYTHONPATH=str(tmp), CI="true")


@pytest.fixture(scope="module")
def failing_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("failing")
    (tmp / "bad_engine.py").write_text(DOUBLING)
    paths = {k: tmp / f"r.{k}" for k in ("json", "html", "xml")}
    argv = ["check", "--engine", "bad_engine:Doubling", "--json", str(paths["json"]), "--html", str(paths["html"]),
            "--junitxml", str(paths["xml"]), "--progress"]
    for cid in CONTRACTS:
        argv += ["--contract", cid.lower()]
    return inprocess.check(*argv[1:], env={"CI": "true"}, path=[tmp]), paths, tmp


@pytest.mark.e2e
def test_a_failed_contract_exits_1(failing_run):
    p, _, _ = failing_run
    assert p.returncode == 1, p.stdout + p.stderr
    assert "1 contract(s) failed: SCALE-001" in p.stderr
    _, paths, _ = failing_run
    for kind in ("json", "xml", "html"):  # every report is announced, not only the page
        assert f"dspark-contracts: wrote {paths[kind]}" in p.stdout, p.stdout[-500:]


def test_json_carries_engine_profile_and_the_violation(failing_run):
    data = json.loads(failing_run[1]["json"].read_text())
    assert (data["engine"], data["engine_name"], data["engine_spec"]) == (LABEL, "doubling", "bad_engine:Doubling")
    assert data["engine_version"] == _version() and data["engine_device"] == "cpu" and "ranks" not in data["capabilities"]
    assert data["hypothesis"] == {"profile": "ci", "derandomize": True, "max_examples": 100, "seed": None, "database": False}
    rows = {r["id"]: r for r in data["contracts"]}
    assert {i: r["result"] for i, r in rows.items()} == {"SCALE-001": "failed", "DPSYNC-001": "passed", "RANKS-001": "skipped"}
    f = rows["SCALE-001"]["failure"]
    assert f["field"] == "scaled counts" and f["expected"] != f["observed"] and f["case"].startswith("ScalingCase(")
    assert f"replay('SCALE-001', 'bad_engine:Doubling', {f['case']})" in f["repro"]
    assert f"SCALE-001 [engine={LABEL}]" in rows["SCALE-001"]["detail"]  # the violation and the table agree on the name
    assert rows["DPSYNC-001"]["failure"] is None and rows["RANKS-001"]["requires"] == ["ranks"]
    assert [s["tau"] >= 1 for s in data["step_sample"]["steps"]] == [True] * 12


@pytest.mark.e2e
def test_the_repro_line_replays_the_failure(failing_run):
    data, tmp = json.loads(failing_run[1]["json"].read_text()), failing_run[2]
    repro = {r["id"]: r for r in data["contracts"]}["SCALE-001"]["failure"]["repro"]
    code = re.fullmatch(r'python -c "(.*)"', repro).group(1)
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(tmp), capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "ContractViolation: SCALE-001" in p.stderr, p.stdout + p.stderr


def test_junitxml_holds_the_failure_and_its_fields(failing_run):
    cases = {c.get("name"): c for c in ET.parse(failing_run[1]["xml"]).getroot().iter("testcase")}
    assert set(cases) == {f"test_contract[{c}]" for c in CONTRACTS}
    scale = cases["test_contract[SCALE-001]"]
    props = {p.get("name"): p.get("value") for p in scale.iter("property")}
    assert scale.find("failure") is not None and props["dspark_field"] == "scaled counts" and props["dspark_engine"] == LABEL
    assert cases["test_contract[RANKS-001]"].find("skipped") is not None


def test_progress_prints_one_line_per_contract_instead_of_dots(failing_run):
    out = failing_run[0].stdout
    lines = re.findall(r"^([A-Z]+-\d{3}) +(passed|failed|skipped) +\d+\.\ds$", out, re.M)
    assert sorted(lines) == sorted([("SCALE-001", "failed"), ("DPSYNC-001", "passed"), ("RANKS-001", "skipped")])
    assert not re.search(r"^[.Fs]+ *(\[ *\d+%\])?$", out, re.M), out  # pytest's ".Fs" status line


class _Page(HTMLParser):
    """Collects the matrix cells, the SVGs and anything that would load from outside."""

    def __init__(self):
        super().__init__()
        self.tags, self.cells, self.headers, self.external, self.svgs, self.bars = [], [], [], [], 0, 0
        self._in = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        if tag in ("script", "link", "img", "iframe", "object") or "src" in attrs or \
                not (attrs.get("href") or "#").startswith("#"):  # a link within the page loads nothing
            self.external.append((tag, attrs))
        self.svgs += tag == "svg"
        self.bars += tag == "rect" and attrs.get("class") == "bar"
        if tag == "td" and attrs.get("class") in ("passed", "failed", "skipped", "known-failure", "absent"):
            self.cells.append(attrs["class"])
        if tag == "th":
            self._in = "th"

    def handle_data(self, data):
        if self._in == "th":
            self.headers.append(data.strip())
            self._in = None


def _parse(text) -> _Page:
    page = _Page()
    page.feed(text)
    return page


def test_html_page_holds_matrix_failures_and_charts_with_nothing_external(failing_run):
    text = failing_run[1]["html"].read_text()
    page = _parse(text)
    assert page.external == [] and "url(" not in text and "http" not in text and "@import" not in text
    assert f"{LABEL} {_version()}" in page.headers and {"SCALE-001", "DPSYNC-001", "RANKS-001"} <= set(page.headers)
    assert sorted(page.cells) == ["failed", "passed", "skipped"]  # one column: one cell per contract
    assert page.svgs == 3 and page.bars == 5 + 5 + 12  # accept 0..4, verify 1..5, tau per step
    for word in ("scaled counts", "ScalingCase(counts=", "replay(&#x27;SCALE-001&#x27;"):
        assert word in text, word


def test_html_renders_in_a_headless_browser(failing_run, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed")
    page = failing_run[1]["html"]
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
             "--window-size=1200,2000"]
    dom = subprocess.run(flags + ["--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    parsed = _parse(dom.stdout)
    assert sorted(parsed.cells) == ["failed", "passed", "skipped"] and parsed.svgs == 3 and parsed.bars == 22
    shot = tmp_path / "page.png"
    p = subprocess.run(flags + [f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", p.stderr[-2000:]


def test_report_command_puts_each_run_in_its_own_column(failing_run, tmp_path, capsys):
    first = json.loads(failing_run[1]["json"].read_text())
    second = {**first, "engine": "other", "engine_version": "2.0", "step_sample": {"skipped": "no step level"},
              "contracts": [{**r, "result": "passed", "failure": None} for r in first["contracts"][:2]]}
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, run in zip(paths, (first, second)):
        path.write_text(json.dumps(run))
    out = tmp_path / "both.html"
    assert cli.main(["report", *map(str, paths), "--html", str(out)]) == 0
    page = _parse(out.read_text())
    assert "other 2.0" in page.headers and f"{LABEL} {_version()}" in page.headers
    assert len(page.cells) == 2 * 3 and page.cells.count("absent") == 1  # RANKS-001 was not in the second run
    assert "no step level" in out.read_text()
    assert cli.main(["report", str(tmp_path / "missing.json"), "--html", str(out)]) == 2
    assert "missing.json" in capsys.readouterr().err
    assert cli.main(["report", str(paths[0]), "--html", "/dev/full"]) == 1  # a full disk, as under check
    assert capsys.readouterr().err.strip() == "dspark-contracts: could not write /dev/full: No space left on device"


def test_render_refuses_what_is_not_a_run():
    with pytest.raises(ValueError, match=r"runs: expected at least one run"):
        render([])
    with pytest.raises(ValueError, match=r"runs\[0\]: expected a `check --json` result"):
        render([{"counts": {}}])
    with pytest.raises(ValueError, match=r"labels/values"):
        bar_chart("t", [1, 2], [1])


@pytest.mark.e2e
def test_failure_fields_survive_xdist(tmp_path):
    pytest.importorskip("xdist")
    (tmp_path / "bad_engine.py").write_text(DOUBLING)
    out = tmp_path / "r.json"
    p = inprocess.check("--engine", "bad_engine:Doubling", "-n", "1", "--contract", "SCALE-001", "--contract", "DPSYNC-001",
                        "--json", str(out), env={"CI": "true"}, path=[tmp_path])
    assert p.returncode == 1, p.stdout + p.stderr
    data = json.loads(out.read_text())
    rows = {r["id"]: r for r in data["contracts"]}
    assert data["engine"] == LABEL and data["engine_version"] == _version()
    assert rows["SCALE-001"]["failure"]["field"] == "scaled counts" and rows["DPSYNC-001"]["result"] == "passed"


_KNOWN = """
    import pytest
    from contracts.ledger import KnownFailure
    pytest_plugins = ['contracts.plugin']

    @pytest.fixture(autouse=True)
    def pretend_known(monkeypatch, engine):  # undone after the test, so the outer session is unaffected
        # A pack lists its known failures on its adapter (`known_failures`); this one, for this test only.
        monkeypatch.setattr(engine, "known_failures", (KnownFailure("reference", f"=={engine.version}", "SCALE-001",
                                                                    "^scaled counts$", "evidence: pretend"),))
        scale = type(engine).scale_rank_counts  # the loaded adapter's own class: no module identity to get wrong
        monkeypatch.setattr(type(engine), "scale_rank_counts",
                            lambda self, c, lc, w, lw: ([x + 1 for x in scale(self, c, lc, w, lw)[0]], list(lc)))
"""


def test_a_known_failure_keeps_the_ledger_reason_and_the_violation_fields(pytester, tmp_path):
    pytester.makeconftest(_KNOWN)
    pytester.makepyfile(test_x="from contracts.suite.test_contracts import test_contract")
    out = tmp_path / "k.json"
    result = pytester.runpytest("-k", "SCALE-001", "-p", "no:cacheprovider", "--contracts-json", str(out))
    assert result.ret == 0 and result.parseoutcomes().get("known") == 1  # pytest counts it as the table: a known failure
    (row,) = json.loads(out.read_text())["contracts"]
    assert row["result"] == "known-failure" and "evidence: pretend" in row["detail"]
    assert row["failure"]["field"] == "scaled counts" and row["failure"]["case"].startswith("ScalingCase(")


def test_a_report_that_cannot_be_written_names_its_file():
    p = inprocess.check("--contract", "SCALE-001", "--html", "/dev/full", env={"CI": "true"})
    assert p.returncode == 1 and p.stderr.strip().endswith("could not write /dev/full: No space left on device"), p.stderr

"""The HTML page as a reader meets it: a summary strip first, then the failures, then the matrix (a failing or known
cell links to its details, a skipped cell says why), and step pictures for every engine with the step level, in the
spec the engine runs. Checked parsed, and in headless Chromium at a 1400 px window with a full-page screenshot."""

import re

import pytest

from contracts import protocol
from contracts.adapters.reference import ReferenceAdapter
from contracts.html_report import render, write_html
from contracts.step_sample import sample_steps
from tests.browser import Page, chromium


class StaticOnly(ReferenceAdapter):
    """A step level without the ragged modes, as SGLang's: a compact-mode spec is not one it takes."""

    name = "static-only"
    capabilities = ReferenceAdapter.capabilities - {protocol.STEP_RAGGED}

    def new_engine(self, spec):
        if spec.verify_mode != "static" or spec.force_budget_frac is not None:
            raise ValueError(f"verify_mode: only static, got {spec.verify_mode!r}")
        return super().new_engine(spec)


def _row(cid, result, requires=("verify",), detail="", failure=None, traceback="", seconds=1.0):
    return {"id": cid, "statement": f"statement of {cid}", "engine": "e", "requires": list(requires), "result": result,
            "seconds": seconds, "detail": detail, "failure": failure, "hardening": "", "traceback": traceback}


def _run(name, rows, capabilities, sample):
    counts = {k: sum(r["result"] == k for r in rows) for k in
              ("passed", "failed", "skipped", "known-failure", "hardening", "harness-error")}
    return {"engine": name, "engine_version": "1.0", "engine_device": "cpu", "engine_backend": None,
            "capabilities": capabilities, "hypothesis": {"profile": "ci", "derandomize": True, "max_examples": 100},
            "counts": counts, "contracts": rows, "step_sample": sample}


FAILURE = {"field": "scaled counts", "expected": "[2]", "observed": "[4]", "case": "ScalingCase(counts=(1,))",
           "repro": "python -c \"...\"", "where": ""}


@pytest.fixture(scope="module")
def runs():
    ragged = sample_steps(ReferenceAdapter())
    static = sample_steps(StaticOnly())
    first = _run("reference", [_row("SCALE-001", "failed", detail="SCALE-001 [engine=e]: ...", failure=FAILURE),
                               _row("PLAN-010", "known-failure", detail="known failure (evidence: cached layout)",
                                    failure=FAILURE),
                               _row("RANKS-001", "skipped", requires=("ranks",), detail="Skipped: engine e lacks ranks"),
                               _row("VERIFY-004", "harness-error", detail="harness error: IndexError",
                                    traceback="Traceback (most recent call last):\n  File contracts/catalog/verify.py"),
                               _row("VERIFY-003", "passed")],
                 ["verify", "step"], ragged)
    second = _run("static-only", [_row("SCALE-001", "passed"), _row("PLAN-010", "known-failure", detail="ev",
                                                                    failure=FAILURE),
                                  _row("RANKS-001", "skipped", requires=("ranks", "ranks.tp-sync")),
                                  _row("VERIFY-003", "passed")],
                  ["verify", "step"], static)
    return [first, second]


def test_the_step_sample_takes_a_spec_the_engine_runs(runs):
    ragged, static = runs[0]["step_sample"], runs[1]["step_sample"]
    assert "error" not in static and static["verify_mode"] == "static" and static["budget_frac"] is None, static
    assert ragged["verify_mode"] == "compact" and ragged["budget_frac"] == 0.5 and "error" not in ragged
    assert len(static["steps"]) > 0 and all(set(s["verify_lens"]) == {5} for s in static["steps"])  # whole blocks


def test_summary_first_then_failures_then_the_matrix(runs):
    text = render(runs)
    strip, failures, matrix = text.index('class="strip"'), text.index('id="failures"'), text.index('class="matrix"')
    assert strip < failures < matrix
    for name, counts in (("reference", "1 passed 1 failed 1 known 0 hardening 1 skipped 1 harness-error"),
                         ("static-only", "2 passed 0 failed 1 known 0 hardening 1 skipped")):
        block = re.search(rf'<div class="run"><span class="name">{name} 1.0</span>(.*?)</div>', text).group(1)
        assert " ".join(re.findall(r">([^<>]+)</span>", block)) == counts, block


def test_every_failing_or_known_cell_links_to_its_details(runs):
    text = render(runs)
    cells = re.findall(r'<td class="(failed|known-failure|harness-error)"[^>]*><a href="#([^"]+)">', text)
    assert sorted(c for c, _ in cells) == ["failed", "harness-error", "known-failure", "known-failure"]
    for _, anchor in cells:
        assert text.count(f'id="{anchor}"') == 1, anchor
    assert "Traceback (most recent call last):" in text  # a harness error shows its traceback


def test_skip_reasons_are_in_the_cell(runs):
    text = render(runs)
    reasons = re.findall(r'<td class="skipped"[^>]*>.*?<span class="why">([^<]*)</span></td>', text)
    assert reasons == ["lacks ranks", "lacks ranks, ranks.tp-sync"]


def test_every_engine_with_the_step_level_gets_its_pictures(runs):
    text = render(runs)
    steps = text[text.index("<h2>Step level</h2>"):]
    assert steps.count("<svg") == 6 and "static mode, no forced budget" in steps and "compact mode, budget fraction 0.5" in steps


@pytest.mark.skipif(chromium() is None, reason="chromium is not installed (apt-get install chromium)")
def test_the_page_in_chromium_at_1400_px(runs, tmp_path):
    page_path = tmp_path / "page.html"
    write_html(str(page_path), runs)
    with Page(page_path.as_uri(), 1400, tmp_path / "profile") as page:
        assert page.eval("document.documentElement.scrollWidth") <= 1400  # nothing runs off to the side
        tops = page.eval("['.strip', '#failures', '.matrix', '.steps'].map(s => document.querySelector(s)"
                         ".getBoundingClientRect().top + window.scrollY)")
        assert tops == sorted(tops) and tops[0] < 200, tops  # the summary at the top, the failures before the matrix
        broken = page.eval("[...document.querySelectorAll('a[href^=\"#\"]')].map(a => a.getAttribute('href'))"
                           ".filter(h => !document.getElementById(h.slice(1)))")
        assert broken == []
        visible = page.eval("[...document.querySelectorAll('td.skipped .why')].map(e => e.offsetHeight > 0 && e.innerText)")
        assert visible == ["lacks ranks", "lacks ranks, ranks.tp-sync"]
        assert page.eval("document.querySelectorAll('section.steps svg').length") == 6
        shot = tmp_path / "page.png"
        width, height = page.screenshot(shot)
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")) == (1400, height)
    assert height > 900  # the whole page, past the 900 px window

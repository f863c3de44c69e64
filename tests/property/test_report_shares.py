"""A contract a pack runs at a share of its budget (`example_shares`, `draw_shares`: contracts.budget) says so: a
line under the terminal table, the row's fields in the JSON, a note in its HTML cell; a draw share never applies
under nightly, which runs every row."""

import json
import textwrap

import pytest

from contracts.adapters.reference import ReferenceAdapter
from contracts.html_report import render
from contracts.report import share_properties
from tests import inprocess

pytestmark = pytest.mark.cpu

PACK = textwrap.dedent("""
    from contracts.adapters.reference import ReferenceAdapter
    class Shared(ReferenceAdapter):
        name = "shared"
        example_shares = {"VERIFY-003": 0.25}
        draw_shares = {"LOSSLESS-004": 0.5}
""")


def test_a_row_run_at_a_share_says_so_in_the_table_the_json_and_the_page(tmp_path):
    (tmp_path / "shared_pack.py").write_text(PACK)
    out = tmp_path / "r.json"
    p = inprocess.check("--engine", "shared_pack:Shared", "--json", str(out), "--contract", "VERIFY-003",
                        "--contract", "LOSSLESS-004", "--contract", "VERIFY-004", env={"CI": "true"}, path=[tmp_path])
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert "ran at the pack's share of their budget: 2 contract(s)" in lines, p.stdout
    assert "  examples x0.25 (1): VERIFY-003" in lines and "  rows x0.5 (1): LOSSLESS-004" in lines, p.stdout
    data = json.loads(out.read_text())
    rows = {r["id"]: (r["example_share"], r["draw_share"]) for r in data["contracts"]}
    assert rows == {"VERIFY-003": (0.25, 1.0), "LOSSLESS-004": (1.0, 0.5), "VERIFY-004": (1.0, 1.0)}
    page = render([data])
    assert page.count('<span class="share">') == 2 and '<span class="share">examples x0.25</span>' in page


def test_a_draw_share_is_not_reported_under_nightly():
    engine = ReferenceAdapter()
    engine.example_shares, engine.draw_shares = {"LOSSLESS-004": 0.5}, {"LOSSLESS-004": 0.5}
    assert share_properties(engine, "LOSSLESS-004", "ci") == [("dspark_example_share", "0.5"), ("dspark_draw_share", "0.5")]
    assert share_properties(engine, "LOSSLESS-004", "nightly") == [("dspark_example_share", "0.5")]
    assert share_properties(engine, "VERIFY-003", "ci") == []

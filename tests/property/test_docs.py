"""The README and docs/ stay true: generated tables match the code, links resolve, the README stays a front door,
and the skeleton pack in docs/writing-an-adapter.md loads and passes its contracts."""

import re
import shutil
import sys
from pathlib import Path

import pytest

from contracts import docs

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _prose(path: Path) -> str:
    """The page without its fenced code blocks: a link or heading inside one is an example, not part of the page."""
    return _FENCE.sub("", path.read_text())


def _anchors(path: Path) -> set:
    """GitHub's heading anchors: lower case, punctuation other than - and _ dropped, spaces to hyphens."""
    heads = re.findall(r"^#{1,6} +(.+?) *#*$", _prose(path), re.M)
    return {re.sub(r"[^\w\- ]", "", h.replace("`", "").lower()).replace(" ", "-") for h in heads}


def test_generated_blocks_match_the_code():
    assert docs.missing_blocks() == []
    stale = docs.stale()
    assert not stale, f"stale generated blocks in {stale}: run `python -m contracts.docs`"


def test_check_names_each_stale_file(tmp_path, monkeypatch, capsys):
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    readme = tmp_path / "README.md"
    readme.write_text(readme.read_text().replace("<!-- end generated -->", "a stale row\n<!-- end generated -->", 1))
    monkeypatch.setattr(docs, "ROOT", tmp_path)
    assert docs.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "README.md is stale" in err and "docs/" not in err, err
    assert docs.main([]) == 0  # rewrites it
    assert docs.main(["--check"]) == 0
    (tmp_path / "docs" / "contracts.md").write_text("# Contracts\n")  # its block deleted
    assert docs.main(["--check"]) == 1
    assert "docs/contracts.md: no generated block 'contracts'" in capsys.readouterr().err


def test_engines_come_from_entry_points_without_loading_an_engine():
    before = set(sys.modules)
    names = [name for name, _ in docs.packs()]
    assert {"reference", "sglang", "sglang-chain", "vllm"} <= set(names), names
    matrix = docs.engine_matrix()
    for name in names:
        assert f"| `{name}`" in matrix
    # Reading a pack's class must not import its engine: the tables are the same with or without it installed.
    assert not {"sglang", "vllm"} & (set(sys.modules) - before)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for target in _LINK.findall(_prose(page)):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = page if not path else (page.parent / path).resolve()
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target} (no heading #{anchor})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move the depth to docs/"


def test_the_skeleton_pack_loads_and_passes(tmp_path, monkeypatch):
    from contracts.engines import load_engine
    from contracts.registry import all_contracts
    from contracts.runner import run_contract

    page = (ROOT / "docs" / "writing-an-adapter.md").read_text()
    code = re.search(r"```python\n(# toy_pack\.py.*?)```", page, re.S)
    assert code, "docs/writing-an-adapter.md lost its `# toy_pack.py` block"
    assert "dspark-contracts check --engine toy_pack:ToyAdapter --contract VERIFY-003" in page
    (tmp_path / "toy_pack.py").write_text(code.group(1))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        engine = load_engine("toy_pack:ToyAdapter")  # the load-time adapter check runs here
        for contract_id in ("VERIFY-003", "VERIFY-012"):  # greedy accept; sample_block on invalid ids
            run_contract(all_contracts()[contract_id], engine, profile="ci", max_examples=25)  # a smoke run
    finally:
        sys.modules.pop("toy_pack", None)

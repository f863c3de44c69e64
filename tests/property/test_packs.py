"""The engine packs are a star around the core: the core imports no pack and no engine, no pack imports another,
and every pack is found through its entry point alone."""

import ast
import re
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ADAPTERS = ROOT / "contracts" / "adapters"
PACKS = sorted(p.name for p in ADAPTERS.iterdir() if (p / "__init__.py").exists())
ENGINES = ("dspark", "sglang", "vllm", "deepspec")  # the engines under test: only their own pack may import one


def _imports(path: Path) -> set:
    """Every module a file imports (statically) or names as a dotted string (import_module, entry points, patch
    targets): the second catches a pack loaded by name at run time."""
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.update(re.findall(r"\bcontracts\.adapters\.\w+", node.value))
    return found


def _core_files():
    return [p for p in (ROOT / "contracts").rglob("*.py") if ADAPTERS not in p.parents]


def test_the_packs_are_found():
    assert {"reference", "sglang", "vllm"} <= set(PACKS)


@pytest.mark.parametrize("path", _core_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_core_imports_no_pack_and_no_engine(path):
    bad = sorted(m for m in _imports(path) if m.startswith("contracts.adapters") or m.split(".")[0] in ENGINES)
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}: the core reaches engines only through entry points"


@pytest.mark.parametrize("pack", PACKS)
def test_no_pack_imports_another(pack):
    for path in (ADAPTERS / pack).rglob("*.py"):
        others = sorted(m for m in _imports(path) if m.startswith("contracts.adapters.")
                        and m.split(".")[2] != pack)
        assert not others, f"{path.relative_to(ROOT)} imports {others}: a pack never imports another pack"


def test_every_pack_is_an_entry_point_and_every_entry_point_a_pack():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["dspark_contracts.engines"]
    owners = {value.split(":")[0].split(".")[2] for value in declared.values()}
    assert owners == set(PACKS), f"packs without an entry point or entry points without a pack: {owners ^ set(PACKS)}"
    installed = {ep.name: ep.value for ep in entry_points(group="dspark_contracts.engines")}
    assert {k: v for k, v in installed.items() if k in declared} == declared  # the editable install is current


OWN_ENGINE = {"reference": "dspark", "sglang": "sglang", "vllm": "vllm", "vllm_dspark": "vllm",
              "deepspec": "deepspec"}  # a new pack adds its own line


@pytest.mark.parametrize("pack", PACKS)
def test_a_pack_imports_no_engine_but_its_own(pack):
    for path in (ADAPTERS / pack).rglob("*.py"):
        foreign = sorted(m for m in _imports(path) if m.split(".")[0] in ENGINES and m.split(".")[0] != OWN_ENGINE.get(pack))
        assert not foreign, f"{path.relative_to(ROOT)} imports {foreign}: another engine's code"


_BROKEN = '''
from contracts import protocol
from contracts.adapters.reference import ReferenceAdapter
from contracts.ledger import KnownFailure


class NoAlgorithms(ReferenceAdapter):  # declares the handoff level without the attribute its contracts read
    name = "no-algorithms"
    handoff_algorithms = property(lambda self: self.missing)


class BadTested(ReferenceAdapter):
    name = "bad-tested"
    tested_versions = "0.1.0"  # a string, not a tuple of them


def bad_range():
    class BadRange(ReferenceAdapter):
        known_failures = (KnownFailure("reference", "0.1 or so", "VERIFY-001", "x", "#1"),)
    return BadRange()
'''


@pytest.mark.parametrize("factory, words", [
    ("NoAlgorithms", "is not a valid adapter: capabilities: declared but not implemented: 'handoff' lacks handoff_algorithms"),
    ("BadTested", "is not a valid adapter: tested_versions: expected a tuple of version strings, got '0.1.0'"),
    ("bad_range", "could not be loaded: ValueError: versions: not a version specifier"),
])
def test_a_broken_pack_is_one_line_naming_the_pack_and_the_problem(tmp_path, monkeypatch, factory, words):
    from contracts.engines import EngineLoadError, load_engine

    (tmp_path / "broken_pack.py").write_text(_BROKEN)
    monkeypatch.chdir(tmp_path)  # found from the current directory, as `python -m` finds a module
    with pytest.raises(EngineLoadError) as caught:
        load_engine(f"broken_pack:{factory}")
    message = str(caught.value)
    assert message.startswith(f"engine 'broken_pack:{factory}' ") and words in message and "\n" not in message, message

"""The contracts never lean on the reference engine: only its adapter imports `dspark`."""

import ast
from pathlib import Path

CONTRACTS = Path(__file__).resolve().parents[2] / "contracts"
ALLOWED = CONTRACTS / "adapters" / "reference"


def _imports(path: Path) -> set:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_no_contract_module_imports_the_reference_engine():
    offenders = [str(p.relative_to(CONTRACTS)) for p in CONTRACTS.rglob("*.py")
                 if ALLOWED not in p.parents and "dspark" in _imports(p)]
    assert offenders == [], f"import dspark outside contracts/adapters/reference: {offenders}"


def test_the_check_finds_an_import(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text("def f():\n    from dspark import planner\n")
    assert "dspark" in _imports(mod)

"""The reference engine never loads the harness: no module of `dspark/` imports `contracts`, by an import statement
or by name (a module path in a string), and a DSpark rank run loads no `contracts` module but the launcher's own.
Also: the launcher is engine-neutral, it imports no engine and no other part of the harness (that no pack imports
another is test_packs.py's)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DSPARK, LAUNCHER = ROOT / "dspark", ROOT / "contracts" / "launcher"
MODULE_PATH = re.compile(r"contracts(\.\w+)*(:[\w.]+)?")  # "contracts.adapters.vllm.dp", "contracts.x:Program"


def _imports(path: Path) -> set:
    """Absolute module names imported by `path`, and string constants that read as a `contracts` module path."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_PATH.fullmatch(node.value):
            names.add(node.value.split(":")[0])
    return names


def _top(name: str) -> str:
    return name.split(".")[0]


def test_no_dspark_module_imports_contracts():
    offenders = {str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if _top(n) == "contracts")
                 for p in DSPARK.rglob("*.py")}
    assert {p: n for p, n in offenders.items() if n} == {}


def test_the_check_finds_an_import_by_statement_or_by_name(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text("import importlib\n\ndef f():\n    from contracts.launcher import launch\n"
                   "    return importlib.import_module('contracts.adapters.vllm.dp')\n")
    assert {"contracts.launcher", "contracts.adapters.vllm.dp"} <= _imports(mod)
    mod.write_text('"""Mentions contracts and contracts. in prose."""\nX = "contracts compare them"\n')
    assert not any(_top(n) == "contracts" for n in _imports(mod))


def test_the_launcher_imports_no_engine_and_no_other_harness_module():
    allowed_top = set(sys.stdlib_module_names) | {"torch"}
    for path in LAUNCHER.rglob("*.py"):
        for name in _imports(path):
            assert _top(name) in allowed_top or name.startswith("contracts.launcher"), f"{path.name} imports {name}"


# In a fresh interpreter: import every dspark module (no `contracts` module may load), then run a DSpark program on
# two forked ranks, each reporting the `contracts` modules its process holds after the run.
_RUN = textwrap.dedent('''
    import importlib, json, pkgutil, sys
    import dspark
    contracts = lambda: sorted(m for m in sys.modules if m == "contracts" or m.startswith("contracts."))
    for info in pkgutil.walk_packages(dspark.__path__, "dspark."):
        if info.name != "dspark.verify.triton_kernels":  # Triton fixes its mode at import; the AST check covers it
            importlib.import_module(info.name)
    after_dspark = contracts()
    from contracts.launcher import launch
    from dspark.dp_runner import DpRunConfig, RankProgram

    class Probe(RankProgram):
        def run(self):
            return super().run()[:-1] + [contracts()]

    result = launch(Probe, DpRunConfig(2, ((1, 0), (0, 2))), 2, steps=2, backend="gloo", start_method="fork")
    print(json.dumps({"after_dspark": after_dspark, "launcher": contracts(),
                      "ranks": [obs[-1] for obs in result.observations]}))
''')


@pytest.mark.e2e
def test_dspark_loads_no_contracts_module_at_run_time():
    out = subprocess.run([sys.executable, "-c", _RUN], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["after_dspark"] == []
    assert seen["launcher"] and all(m == "contracts" or m.startswith("contracts.launcher") for m in seen["launcher"])
    assert seen["ranks"] == [seen["launcher"]] * 2, "a rank loaded a contracts module beyond the launcher's own"

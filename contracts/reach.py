"""Reach: how much of an engine's own DSpark code a contract run executed (coverage.py, statements and branches).

A pack names its engine's DSpark code as `coverage_modules` (module or package names). `measured_child` runs the
check under `coverage run`, so it is measured from its first line (the engine's module-level code counts) and in
every rank process it starts through `multiprocessing` (the launcher's); the rows come one per declared module, a
package summed over its files (files it never imported count, at 0).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
from dataclasses import asdict, dataclass
from typing import Iterator, List, Sequence

INSTALL = "pip install coverage"


@dataclass
class ModuleReach:
    module: str
    files: int
    statements: int
    covered: int
    branches: int
    covered_branches: int

    @property
    def percent(self) -> float:
        return 100.0 * self.covered / self.statements if self.statements else 100.0

    @property
    def branch_percent(self) -> float:
        return 100.0 * self.covered_branches / self.branches if self.branches else 100.0

    def as_dict(self) -> dict:
        return {**asdict(self), "percent": round(self.percent, 1), "branch_percent": round(self.branch_percent, 1)}


def coverage_missing() -> str | None:
    """None when coverage.py is importable, else the one line `--coverage` exits 2 with."""
    if importlib.util.find_spec("coverage") is None:
        return f"--coverage: needs coverage.py, which is not installed ({INSTALL})"
    return None


def _location(module: str):
    """(file or folder, is_package), or None when the module does not exist. Finding a submodule imports its parent
    packages, never the module itself."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin in (None, "built-in", "frozen"):
        return None
    if spec.submodule_search_locations:
        return os.path.realpath(list(spec.submodule_search_locations)[0]), True
    return os.path.realpath(spec.origin), False


def missing_modules(modules: Sequence[str]) -> List[str]:
    return [m for m in modules if _location(m) is None]


def _rcfile(modules: Sequence[str], folder: str) -> str:
    """coverage.py's settings as a file: a measured process and every process it starts read them from there."""
    rc = os.path.join(folder, "coveragerc")
    with open(rc, "w") as f:
        f.write("[run]\nbranch = True\nparallel = True\nconcurrency = thread,multiprocessing\n"
                f"data_file = {os.path.join(folder, '.coverage')}\n"
                "disable_warnings = module-not-measured, module-not-imported, no-data-collected\n"
                "source_pkgs =\n" + "".join(f"    {m}\n" for m in modules))
    return rc


class MeasuredRun:
    """Runs a command under `coverage run` (`__call__`, returning its exit code); `rows` holds the result after."""

    def __init__(self, modules: Sequence[str], folder: str):
        self.modules, self.folder, self.rc = tuple(modules), folder, _rcfile(modules, folder)
        self.rows: List[ModuleReach] = []

    def __call__(self, command: Sequence[str], **kwargs) -> int:
        import subprocess

        python, rest = command[0], list(command[1:])
        return subprocess.run([python, "-m", "coverage", "run", f"--rcfile={self.rc}", *rest], **kwargs).returncode

    def collect(self) -> None:
        import coverage

        cov = coverage.Coverage(config_file=self.rc)
        cov.combine()
        report = os.path.join(self.folder, "report.json")
        try:
            cov.json_report(outfile=report)
            with open(report) as f:
                files = json.load(f)["files"]
        except coverage.exceptions.NoDataError:
            files = {}
        self.rows = [_row(m, files) for m in self.modules]


@contextlib.contextmanager
def measured_child(modules: Sequence[str], folder: str) -> Iterator[MeasuredRun]:
    """A runner for one command measured from its first line, the modules' rows collected when the block ends."""
    run = MeasuredRun(modules, folder)
    yield run
    run.collect()


def _row(module: str, files: dict) -> ModuleReach:
    where, package = _location(module) or ("", False)
    mine = [s["summary"] for path, s in files.items()
            if (os.path.realpath(path).startswith(where + os.sep) if package else os.path.realpath(path) == where)]
    total = lambda key: sum(s[key] for s in mine)  # noqa: E731
    return ModuleReach(module, len(mine), total("num_statements"), total("covered_lines"), total("num_branches"),
                       total("covered_branches"))


def table(rows: Sequence[ModuleReach]) -> str:
    width = max([len("module")] + [len(r.module) for r in rows])
    lines = [f"{'module':<{width}}  {'stmts':>6}  {'covered':>7}  {'branches':>8}  {'covered':>7}"]
    for r in rows:
        lines.append(f"{r.module:<{width}}  {r.statements:>6}  {r.percent:>6.0f}%  {r.branches:>8}  {r.branch_percent:>6.0f}%")
    return "\n".join(lines)

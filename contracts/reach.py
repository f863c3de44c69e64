"""Reach: how much of an engine's own DSpark code a contract run executed (coverage.py, statements and branches).

A pack names its engine's DSpark code as `coverage_modules` (module or package names), found on disk without
importing them. `measured_child` runs the check under `coverage run`, so it is measured from its first line (the
engine's module-level code counts) and in every rank process it starts through `multiprocessing` (the
launcher's); the rows come one per declared module, a package summed over its files (files it never imported
count, at 0).
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


def module_files(module: str) -> List[str]:
    """The source files of a module or package, found on disk from its top-level package without importing
    anything: an engine's packages may need its own import setup first (coverage.py's `source_pkgs` would import
    the parents at start, before that setup: SGLang's then broke torch's import). Empty when it does not exist."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name is located, not imported
    except (ImportError, ValueError):
        return []
    if spec is None or spec.origin in ("built-in", "frozen"):
        return []
    if not spec.submodule_search_locations:
        return [os.path.realpath(spec.origin)] if not rest and spec.origin else []
    base = os.path.join(list(spec.submodule_search_locations)[0], *rest)
    if os.path.isdir(base):
        return sorted(os.path.realpath(os.path.join(d, f)) for d, _, names in os.walk(base)
                      for f in names if f.endswith(".py"))
    return [os.path.realpath(base + ".py")] if os.path.isfile(base + ".py") else []


def missing_modules(modules: Sequence[str]) -> List[str]:
    return [m for m in modules if not module_files(m)]


def _rcfile(files: Sequence[str], folder: str) -> str:
    """coverage.py's settings as a file: a measured process and every process it starts read them from there."""
    rc = os.path.join(folder, "coveragerc")
    with open(rc, "w") as f:
        f.write("[run]\nbranch = True\nparallel = True\nconcurrency = thread,multiprocessing\n"
                f"data_file = {os.path.join(folder, '.coverage')}\n"
                "disable_warnings = no-data-collected\n"
                "include =\n" + "".join(f"    {path}\n" for path in files))
    return rc


class MeasuredRun:
    """Runs a command under `coverage run` (`__call__`, returning its exit code); `rows` holds the result after."""

    def __init__(self, modules: Sequence[str], folder: str):
        self.files = {m: module_files(m) for m in modules}
        self.modules, self.folder = tuple(modules), folder
        self.rc = _rcfile([f for fs in self.files.values() for f in fs], folder)
        self.rows: List[ModuleReach] = []
        self.lines: dict = {}  # {file, relative to its install root: [executed line numbers]}

    def __call__(self, command: Sequence[str], **kwargs) -> int:
        import subprocess

        python, rest = command[0], list(command[1:])
        return subprocess.run([python, "-m", "coverage", "run", f"--rcfile={self.rc}", *rest], **kwargs).returncode

    def collect(self) -> None:
        import coverage

        cov = coverage.Coverage(config_file=self.rc)
        cov.combine()
        report = os.path.join(self.folder, "report.json")
        every = [f for fs in self.files.values() for f in fs]  # files never imported are reported too, at 0
        try:
            cov.json_report(morfs=every, outfile=report)
            with open(report) as f:
                measured = {os.path.realpath(k): v for k, v in json.load(f)["files"].items()}
        except coverage.exceptions.NoDataError:
            measured = {}
        files = {k: v["summary"] for k, v in measured.items()}
        self.lines = {_relative(k, m): sorted(v["executed_lines"]) for m, fs in self.files.items() for k in fs
                      if (v := measured.get(k)) and v["executed_lines"]}
        self.rows = [_row(m, [files[f] for f in self.files[m] if f in files]) for m in self.modules]


@contextlib.contextmanager
def measured_child(modules: Sequence[str], folder: str) -> Iterator[MeasuredRun]:
    """A runner for one command measured from its first line, the modules' rows collected when the block ends."""
    run = MeasuredRun(modules, folder)
    yield run
    run.collect()


def _relative(path: str, module: str) -> str:
    """`sglang/srt/...py`: a file of `module` relative to the folder its top-level package is installed in."""
    top = module.split(".")[0]
    parts = path.split(os.sep)
    return "/".join(parts[len(parts) - 1 - parts[::-1].index(top):]) if top in parts else path


def read_baseline(path: str) -> dict:
    """`--coverage-baseline`: the executed lines of an earlier `check --coverage --json` run."""
    try:
        with open(path) as f:
            lines = json.load(f)["coverage_lines"]
    except FileNotFoundError:
        raise ValueError(f"--coverage-baseline: no such file {path!r}") from None
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"--coverage-baseline: {path!r} is not the --json of a `check --coverage` run "
                         "(no coverage_lines)") from None
    if not isinstance(lines, dict):
        raise ValueError(f"--coverage-baseline: {path!r}: coverage_lines is not a mapping of file -> lines")
    return lines


def newly_covered(lines: dict, baseline: dict) -> dict:
    """{file: [lines this run executed that the baseline did not]}, files with none left out."""
    out = {}
    for f, now in lines.items():
        new = sorted(set(now) - set(baseline.get(f, ())))
        if new:
            out[f] = new
    return out


def _ranges(numbers) -> str:
    spans, start, prev = [], None, None
    for n in numbers:
        if start is None:
            start = prev = n
        elif n == prev + 1:
            prev = n
        else:
            spans.append((start, prev))
            start = prev = n
    if start is not None:
        spans.append((start, prev))
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def new_lines_table(new: dict, most: int = 20) -> str:
    total = sum(len(v) for v in new.values())
    head = f"{total} line(s) newly covered in {len(new)} file(s)"
    rows = sorted(new.items(), key=lambda kv: -len(kv[1]))
    body = [f"  {f}: {_ranges(v)}" for f, v in rows[:most]]
    more = [f"  ... {len(rows) - most} more file(s) in the JSON (coverage_new)"] if len(rows) > most else []
    return "\n".join([head, *body, *more])


def _row(module: str, summaries: list) -> ModuleReach:
    total = lambda key: sum(s[key] for s in summaries)  # noqa: E731
    return ModuleReach(module, len(summaries), total("num_statements"), total("covered_lines"), total("num_branches"),
                       total("covered_branches"))


def table(rows: Sequence[ModuleReach]) -> str:
    width = max([len("module")] + [len(r.module) for r in rows])
    lines = [f"{'module':<{width}}  {'stmts':>6}  {'covered':>7}  {'branches':>8}  {'covered':>7}"]
    for r in rows:
        lines.append(f"{r.module:<{width}}  {r.statements:>6}  {r.percent:>6.0f}%  {r.branches:>8}  {r.branch_percent:>6.0f}%")
    return "\n".join(lines)

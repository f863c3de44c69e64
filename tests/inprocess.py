"""`dspark-contracts ARGS` and `pytest ARGS` run in this process, through the entry points a user's command calls
(`contracts.cli.main`, `pytest.main`), without a fresh interpreter and torch imported again (about 2 s a call on a
2-core machine). What separate processes would not share is kept apart: the environment (as `tests.hermetic`
gives a subprocess), sys.path, the modules of the folders put on it, Hypothesis' loaded profile and torch's
thread count. `tests.hermetic.run_python` stays the tool for what only a new process shows (console scripts,
interpreter start-up, spawned ranks)."""

from __future__ import annotations

import io
import os
import sys
from contextlib import chdir, contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

from contracts.plugin import _profile_name
from tests.hermetic import ROOT, clean_env


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@contextmanager
def isolated(env=None, path=()):
    """The environment `clean_env(**env)`, the folders `path` first on sys.path (their modules forgotten
    afterwards), and Hypothesis' profile and torch's thread count as they were, whatever the run changed."""
    import torch
    from hypothesis import settings

    saved_env, saved_path, profile, threads = dict(os.environ), list(sys.path), _profile_name(), torch.get_num_threads()
    fresh, folders = clean_env(**(env or {})), [str(Path(p).resolve()) for p in path]
    # pytest-xdist hands its local workers the sys.path it froze when it was imported (at this session's start),
    # not the current one: without the folders on it, a worker could not import the engine. (One list, shared by
    # the modules that imported it: changed in place.)
    xdist = sys.modules.get("xdist.plugin")
    frozen = list(xdist._sys_path) if xdist else list(saved_path)
    try:
        os.environ.clear()
        os.environ.update(fresh)
        sys.path[:0] = folders
        if xdist:
            xdist._sys_path[:] = sys.path
        yield
    finally:
        xdist = sys.modules.get("xdist.plugin")  # imported by the run itself, it froze the folders in
        if xdist:
            xdist._sys_path[:] = frozen
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path
        for name, module in list(sys.modules.items()):  # a user's engine module of the same name may come next
            where = getattr(module, "__file__", None) or ""
            if any(where.startswith(folder + os.sep) for folder in folders):
                del sys.modules[name]
        settings.load_profile(profile)
        torch.set_num_threads(threads)


def _run(call, env, path) -> Result:
    out, err = io.StringIO(), io.StringIO()
    with isolated(env, path), redirect_stdout(out), redirect_stderr(err):
        try:
            code = call()
        except SystemExit as e:  # argparse's usage errors, with the exit code the interpreter would give
            code = 0 if e.code is None else e.code
            if not isinstance(code, int):  # a message: printed, exit 1
                print(code, file=sys.stderr)
                code = 1
    return Result(int(code), out.getvalue(), err.getvalue())


def check(*argv, env=None, path=()) -> Result:
    """`dspark-contracts check ARGS` (`contracts.cli.main`)."""
    from contracts.cli import main

    return _run(lambda: main(["check", *argv]), env, path)


def pytest_run(*argv, env=None, path=()) -> Result:
    """`pytest ARGS` from the repository root (`pytest.main`)."""
    import pytest

    def call():
        with chdir(ROOT):
            return pytest.main(list(argv))

    return _run(call, env, path)

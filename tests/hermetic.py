"""Subprocesses as a user starts them: the project's Python, the repository root, and none of the caller's
DSPARK_ENGINE / DSPARK_DEVICE / DSPARK_BACKEND choices (so a test sees the defaults unless it sets them)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SELECTIONS = ("DSPARK_ENGINE", "DSPARK_DEVICE", "DSPARK_BACKEND")


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in SELECTIONS}
    env.update(extra)
    return env


def run_python(*args, env=None, cwd=ROOT, timeout=300):
    """`python ARGS` in a subprocess with `clean_env(**env)`; stdout and stderr captured as text."""
    return subprocess.run([sys.executable, *args], cwd=cwd, env=clean_env(**(env or {})), capture_output=True, text=True,
                          timeout=timeout)

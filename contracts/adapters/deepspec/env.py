"""Find DeepSpec's source tree and make it importable.

DeepSpec (deepseek-ai/DeepSpec) is not a pip package: its code is imported from a source tree, the snapshot at
``../shared/engines/deepspec`` from the repository root (resolved from this package's location), or the tree
``DSPARK_DEEPSPEC_PATH`` names (a clone at the tested commit). Its version is its commit: read from the clone's
``.git`` or the snapshot's PROVENANCE.md. Nothing here imports DeepSpec or transformers at module import time;
``deepspec_unavailable_reason()`` is cheap (file checks and package metadata) and fit for ``pytest.mark.skipif``.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Optional

__all__ = ["DEEPSPEC_COMMIT", "TRANSFORMERS_VERSION", "PATH_ENV", "INSTALL_HINT", "deepspec_root",
           "deepspec_commit", "deepspec_unavailable_reason", "check_deepspec_installed", "import_deepspec"]

DEEPSPEC_COMMIT = "afdfa7c9382a3341a3e6f17756dd816da79f132c"  # the tree the pack was tested with (its version)
TRANSFORMERS_VERSION = "5.10.2"  # DeepSpec's pin; 5.24 refuses DynamicCache.crop(positive), which the draft block calls
PATH_ENV = "DSPARK_DEEPSPEC_PATH"
INSTALL_HINT = "bash scripts/install_deepspec.sh"
# The modules the pack calls: a tree without them is not DeepSpec's (or is a layout the pack was not written for).
_REQUIRED = ("deepspec/eval/base_evaluator.py", "deepspec/eval/dspark/draft_ops.py", "deepspec/eval/dspark/evaluator.py",
             "deepspec/modeling/dspark/qwen3/config.py", "deepspec/modeling/dspark/qwen3/modeling.py",
             "deepspec/utils/sampling.py")


def deepspec_root() -> Path:
    """The tree to import: $DSPARK_DEEPSPEC_PATH, else ../shared/engines/deepspec from the repository root."""
    env = os.environ.get(PATH_ENV)
    if env:
        return Path(env).expanduser().resolve()
    repo_root = Path(__file__).resolve().parents[3]  # contracts/adapters/deepspec/env.py -> the repository root
    return (repo_root.parent / "shared" / "engines" / "deepspec").resolve()


def deepspec_commit(root: Path) -> Optional[str]:
    """The tree's commit: `git rev-parse HEAD` in a clone, else the 40-hex id PROVENANCE.md names; None if neither."""
    if (root / ".git").exists():
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
        if done.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", done.stdout.strip()):
            return done.stdout.strip()
    provenance = root / "PROVENANCE.md"
    if provenance.is_file():
        found = re.search(r"\bcommit ([0-9a-f]{40})\b", provenance.read_text(encoding="utf-8", errors="replace"))
        if found:
            return found.group(1)
    return None


def deepspec_unavailable_reason() -> Optional[str]:
    """None when the DeepSpec tree and transformers==5.10.2 are there, else one line naming what to set or run."""
    root = deepspec_root()
    where = f"${PATH_ENV}={root}" if os.environ.get(PATH_ENV) else f"{root} (the default; set ${PATH_ENV} to a clone)"
    if not root.is_dir():
        return f"DeepSpec tree not found at {where}: set {PATH_ENV} to a clone of deepseek-ai/DeepSpec at {DEEPSPEC_COMMIT[:12]}"
    missing = [p for p in _REQUIRED if not (root / p).is_file()]
    if missing:
        return (f"{where} is not a DeepSpec tree the pack knows (missing {', '.join(missing)}): set {PATH_ENV} to a "
                f"clone of deepseek-ai/DeepSpec at {DEEPSPEC_COMMIT[:12]}")
    try:
        have = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return f"transformers is not installed; DeepSpec needs transformers=={TRANSFORMERS_VERSION}: run `{INSTALL_HINT}` in its own venv"
    if have != TRANSFORMERS_VERSION:
        return (f"transformers {have} is installed but DeepSpec needs {TRANSFORMERS_VERSION}: run `{INSTALL_HINT}` in its "
                "own venv (see the script's header)")
    return None


def check_deepspec_installed() -> None:
    """Raise RuntimeError with one line naming what to set or run unless DeepSpec can be imported."""
    reason = deepspec_unavailable_reason()
    if reason is not None:
        raise RuntimeError(reason)


def import_deepspec() -> str:
    """Put the tree first on sys.path, import the modules the pack calls (from that tree, not another copy), and
    return the tree's version: its commit, or 'unknown' (untested) when it names none."""
    check_deepspec_installed()
    root = deepspec_root()
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    import deepspec
    import deepspec.eval.base_evaluator  # noqa: F401
    import deepspec.eval.dspark.draft_ops  # noqa: F401
    import deepspec.eval.dspark.evaluator  # noqa: F401

    got = Path(deepspec.__file__).resolve().parent
    if got != root / "deepspec":
        raise RuntimeError(f"deepspec was imported from {got}, not from {root}: another copy shadows it on sys.path; "
                           f"set {PATH_ENV} to that tree or remove the other copy")
    return deepspec_commit(root) or "unknown"

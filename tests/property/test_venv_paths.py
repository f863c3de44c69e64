"""A command the docs give that makes a venv names a concrete folder: inside the repository one that .gitignore covers
(nothing a pasted command leaves behind shows up in `git status`), or one outside it (/tmp); a shell variable only where
the doc sets it; never a placeholder to fill in (`python -m venv VENV`)."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
VENV = re.compile(r"python3? -m venv +(\S+)")


def _venvs():
    out = []
    for doc in DOCS:
        text = doc.read_text()
        for m in VENV.finditer(text):
            path = m.group(1).strip("'\"")
            var = re.fullmatch(r"\$\{?(\w+)\}?", path)
            if var:  # `V=...` set in the doc, before the command
                sets = re.findall(rf"^\s*{var.group(1)}=(\S+)", text[:m.start()], re.M)
                path = sets[-1].strip("'\"") if sets else path
            out.append((str(doc.relative_to(ROOT)), path))
    return out


def test_the_docs_make_at_least_one_venv():
    assert _venvs(), "no `python -m venv` in the docs: this test checks nothing"


@pytest.mark.parametrize("doc, path", _venvs(), ids=lambda x: str(x))
def test_each_venv_path_is_concrete_and_leaves_the_repository_clean(doc, path):
    outside = path.startswith(("/", "${TMPDIR:-/tmp}/", "$TMPDIR/"))
    assert outside or (re.fullmatch(r"[\w.\-/]+", path) and path.upper() != path), \
        f"{doc}: `python -m venv {path}`: expected a concrete path, not a placeholder"
    if outside:
        return
    ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", f"{path.rstrip('/')}/bin/python"], cwd=ROOT)
    assert ignored.returncode == 0, f"{doc}: {path} is inside the repository and not covered by .gitignore"

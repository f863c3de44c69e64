"""Every argument `check` can judge without the engine is judged before the engine (or a user's pack, which is its
engine module) is imported: a bad one exits 2 and the engine module was never imported."""

import sys
import textwrap

import pytest

from contracts.cli import main
from tests.hermetic import SELECTIONS

PACK = textwrap.dedent("""
    import os
    open(os.environ["IMPORT_MARK"], "a").write("imported\\n")
    from contracts.adapters.reference import ReferenceAdapter
    class Pack(ReferenceAdapter):
        name = "marked"
""")


@pytest.fixture
def marked(tmp_path, monkeypatch):
    for var in SELECTIONS:
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "marked_engine.py").write_text(PACK)
    mark = tmp_path / "imported.txt"
    monkeypatch.setenv("IMPORT_MARK", str(mark))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield mark
    sys.modules.pop("marked_engine", None)


@pytest.mark.parametrize("argv, words", [
    (["--contract", "NOPE-001"], "--contract: unknown contract id"),
    (["--json", "/no/such/folder/r.json"], "--json: the folder"),
    (["--html", "."], "--html: '.' is a directory"),
    (["--junitxml", ""], "--junitxml: empty path"),
    (["--device", "gpu"], "--device: expected one of cpu, cuda"),
    (["--require", "grpah"], "--require: unknown capability"),
    (["-n", "0"], "-n/--workers"),
    (["--durations", "-1"], "--durations"),
    (["--profile", "ci", "--hypothesis-seed", "3"], "--hypothesis-seed"),
])
def test_bad_arguments_are_refused_before_the_engine_module_is_imported(marked, argv, words, capsys):
    assert main(["check", "--engine", "marked_engine:Pack", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err
    assert not marked.exists(), "the engine module was imported before the arguments were checked"


def test_a_backend_is_checked_against_the_pack_not_the_engine(capsys):
    """--backend needs the pack's declaration: the sglang pack is imported, SGLang itself is not."""
    before = {m for m in sys.modules if m == "sglang" or m.startswith("sglang.")}
    assert main(["check", "--engine", "sglang", "--backend", "torch"]) == 2
    assert "--backend torch: engine 'sglang' runs its own verify kernels" in capsys.readouterr().err
    assert not {m for m in sys.modules if m == "sglang" or m.startswith("sglang.")} - before


def test_good_arguments_do_import_the_pack(marked, monkeypatch):
    """The control: the mark is written when the module is imported, so its absence above means something."""
    monkeypatch.setattr("contracts.cli._run_check", lambda args: 0)
    assert main(["check", "--engine", "marked_engine:Pack", "--contract", "SCALE-001"]) == 0
    assert marked.read_text() == "imported\n"

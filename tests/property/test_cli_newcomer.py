"""What a newcomer meets first: `--version`, help for a bare command, a `list` that explains itself and can answer
"what runs on my engine", reports that say when and by which harness they were made, and no `.hypothesis/` left in
the folder `check` ran from."""

import json
import re

from contracts import __version__
from contracts.adapters.sglang import SGLangAdapter  # the pack class only: SGLang itself is not imported
from contracts.registry import all_contracts
from tests import inprocess


def _main(*argv):
    from contracts.cli import main

    return inprocess._run(lambda: main(list(argv)), None, ())


def test_version_prints_the_harness_version():
    p = _main("--version")
    assert p.returncode == 0 and p.stdout.strip() == f"dspark-contracts {__version__}", p


def test_a_bare_command_prints_help_not_an_error():
    p = _main()
    assert p.returncode == 0, p
    assert p.stdout.startswith("usage: dspark-contracts") and "check" in p.stdout and "list" in p.stdout, p.stdout
    assert p.stderr == ""


def test_list_has_a_header_and_a_legend():
    p = _main("list")
    lines = p.stdout.splitlines()
    assert p.returncode == 0 and lines[0].startswith(f"{len(all_contracts())} contracts. [...]: the capabilities")
    assert lines[1].split() == ["contract", "[requires]", "statement"], lines[1]
    assert re.match(r"[A-Z]+-\d{3} +\[", lines[2]), lines[2]


def test_list_engine_says_what_runs_there_without_loading_it():
    p = _main("list", "--engine", "sglang")
    assert p.returncode == 0, p.stderr
    rows = {line.split()[0]: line for line in p.stdout.splitlines() if re.match(r"[A-Z]+-\d{3} ", line)}
    assert len(rows) == len(all_contracts())
    assert "skipped: lacks ranks" in rows["RANKS-001"] and "known failure" in rows["PLAN-010"]
    assert "hardening" in rows["VERIFY-012"]
    runs = sum(not (set(c.requires) - SGLangAdapter.capabilities) and c.id not in SGLangAdapter.hardening
               for c in all_contracts().values())
    assert p.stdout.splitlines()[-1] == f"{runs} of {len(all_contracts())} run on sglang", p.stdout.splitlines()[-1]


def test_list_engine_unknown_is_one_line_exit_4():
    p = _main("list", "--engine", "no-such-engine")
    assert p.returncode == 4 and p.stderr.count("\n") == 1 and "unknown engine 'no-such-engine'" in p.stderr


CRASHING = """
from contracts.adapters.reference import ReferenceAdapter

class Crashing(ReferenceAdapter):
    name = "crashing"

    def scale_rank_counts(self, counts, logprob_counts, width, logprob_width):
        raise RuntimeError("engine bug")
"""


def test_check_dates_its_reports_and_leaves_no_hypothesis_folder(tmp_path, monkeypatch):
    """A failure under the dev profile is saved to Hypothesis' example database: in the user's cache, not in a
    .hypothesis/ folder where check ran."""
    run, packs = tmp_path / "run", tmp_path / "packs"
    run.mkdir(), packs.mkdir()
    (packs / "nc_crashing.py").write_text(CRASHING)
    monkeypatch.chdir(run)
    p = inprocess.check("--engine", "nc_crashing:Crashing", "--contract", "SCALE-001", "--profile", "dev",
                        "--json", "r.json", "--html", "r.html", env={"XDG_CACHE_HOME": str(tmp_path / "cache")},
                        path=[packs])
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr
    data = json.loads((run / "r.json").read_text())
    assert data["harness_version"] == __version__ and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", data["date"])
    assert f"dspark-contracts {__version__}" in (run / "r.html").read_text()
    assert sorted(x.name for x in run.iterdir()) == ["r.html", "r.json"]  # no .hypothesis/ here
    saved = tmp_path / "cache" / "dspark-contracts" / "hypothesis" / "examples"
    assert saved.is_dir() and any(saved.iterdir()), "the failing example went to the user's cache"

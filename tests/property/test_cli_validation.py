"""Load-time adapter checks, `check`'s argument checks and its exit codes (in-process: none of these reach pytest)."""

import importlib
import importlib.util
import inspect
import pkgutil
from collections import defaultdict

import pytest

import contracts.boundary as boundary
from contracts import cli, protocol, validation
from contracts.adapters.reference import ReferenceAdapter
from contracts.engines import EngineLoadError, engine_label, load_engine
from contracts.protocol import CAPABILITIES


def _protocol_methods(path: str) -> set:
    module, _, name = path.partition(":")
    cls = getattr(importlib.import_module(module), name)
    return {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}


def test_capability_table_matches_the_boundary_protocols():
    covered = defaultdict(set)
    for cap, spec in CAPABILITIES.items():
        if spec.protocol is None:  # a pure flag promises behaviour, not methods
            assert spec.methods == (), cap
            continue
        extra = set(spec.methods) - _protocol_methods(spec.protocol)
        assert not extra, f"{cap}: {sorted(extra)} are not methods of {spec.protocol}"
        covered[spec.protocol] |= set(spec.methods)
    for path, methods in covered.items():
        assert methods == _protocol_methods(path), f"{path}: no capability requires {_protocol_methods(path) - methods}"


def test_every_level_protocol_and_capability_constant_is_in_the_table():
    levels = set()
    for info in pkgutil.iter_modules(boundary.__path__):
        module = importlib.import_module(f"{boundary.__name__}.{info.name}")
        levels |= {f"{module.__name__}:{n}" for n, v in vars(module).items()
                   if inspect.isclass(v) and n.endswith("Level") and v.__module__ == module.__name__}
    assert levels == {s.protocol for s in CAPABILITIES.values() if s.protocol}
    constants = {v for n, v in vars(protocol).items() if n.isupper() and isinstance(v, str)}
    assert constants == set(CAPABILITIES)


def test_shipped_adapters_implement_what_they_declare():
    validation.validate_adapter(ReferenceAdapter())
    from contracts.adapters.sglang import SGLangAdapter  # the class only: no sglang import needed

    for cap in SGLangAdapter.capabilities:
        assert all(callable(getattr(SGLangAdapter, m, None)) for m in CAPABILITIES[cap].methods), cap


class _Bare:
    name, version, device = "bare", "1", "cpu"
    capabilities = frozenset()


def _adapter(**fields):
    return type("A", (_Bare,), fields)()


@pytest.mark.parametrize("fields, error, words", [
    ({"capabilities": frozenset({"handoff", "grpah"})}, ValueError, ["'grpah'", "known:", "dp-metadata", "ranks"]),
    ({"capabilities": frozenset({"ranks"})}, TypeError, ["'ranks' lacks run_rank_scenario", "RanksLevel"]),
    ({"capabilities": frozenset({"verify"}), "greedy_accept": lambda s, i: None},
     TypeError, ["'verify' lacks finalize, sample_block"]),
    ({"capabilities": "handoff"}, TypeError, ["capabilities: expected a set"]),
    ({"capabilities": frozenset({1})}, TypeError, ["capabilities: expected str names"]),
    ({"version": None}, TypeError, ["version: expected a non-empty str"]),
    ({"name": ""}, TypeError, ["name: expected a non-empty str"]),
])
def test_bad_adapters_are_named_in_one_line(fields, error, words):
    with pytest.raises(error) as e:
        validation.validate_adapter(_adapter(**fields))
    message = str(e.value)
    assert "\n" not in message and all(w in message for w in words), message


def test_pure_flags_and_complete_levels_pass():
    ranks = {"capabilities": frozenset({"ranks", "verify.empty-batch"}), "run_rank_scenario": lambda s, sc: None}
    validation.validate_adapter(_adapter(**ranks))


def test_injected_noise_needs_its_own_methods():
    verify = {m: (lambda *a: None) for m in CAPABILITIES["verify"].methods}
    with pytest.raises(TypeError, match="'verify.injected-noise' lacks sampling_accept, mixed_accept"):
        validation.validate_adapter(_adapter(capabilities=frozenset({"verify", "verify.injected-noise"}), **verify))


def test_load_engine_keeps_the_exception_type_and_labels_the_engine(tmp_path, monkeypatch):
    (tmp_path / "eng_mod.py").write_text(
        "from contracts.adapters.reference import ReferenceAdapter\n"
        "class Renamed(ReferenceAdapter):\n    name = 'renamed'\n"
        "class Odd(ReferenceAdapter):\n    capabilities = frozenset({'kv-cache'})\n"
        "def broken():\n    raise ImportError('no such backend')\n"
        "def wordy():\n    raise ValueError('init failed\\nsecond line')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert engine_label(load_engine("eng_mod:Renamed")) == "renamed (eng_mod:Renamed)"
    assert engine_label(load_engine("reference")) == "reference"
    with pytest.raises(EngineLoadError, match=r"^engine 'eng_mod:broken' could not be loaded: ImportError: no such backend$"):
        load_engine("eng_mod:broken")
    with pytest.raises(EngineLoadError, match=r"^engine 'eng_mod:Odd' is not a valid adapter: capabilities: unknown 'kv-cache'"):
        load_engine("eng_mod:Odd")
    with pytest.raises(EngineLoadError, match=r"^engine 'eng_mod:wordy' could not be loaded: ValueError: init failed \| second line$"):
        load_engine("eng_mod:wordy")


def test_an_engine_from_the_environment_is_traced_to_it(monkeypatch, capsys):
    monkeypatch.setenv("DSPARK_ENGINE", "nosuch")
    assert cli.main(["check"]) == 4
    err = capsys.readouterr().err.strip()
    assert err.startswith("dspark-contracts: unknown engine 'nosuch'") and err.endswith("$DSPARK_ENGINE)"), err


# ---- argument checks -----------------------------------------------------------------------


def test_contract_ids_are_case_insensitive_and_deduplicated():
    known = ["HANDOFF-001", "HANDOFF-002", "DPSYNC-001"]
    assert validation.contract_ids(["handoff-001", " DPSYNC-001", "Handoff-001"], known) == ["HANDOFF-001", "DPSYNC-001"]


def test_unknown_contract_id_suggests_the_nearest():
    with pytest.raises(ValueError, match=r"--contract: unknown contract id 'HANDOF-001'; did you mean HANDOFF-001"):
        validation.contract_ids(["HANDOF-001"], ["HANDOFF-001", "DPSYNC-001"])


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", ""])
def test_bad_worker_counts_are_refused(value):
    with pytest.raises(ValueError, match=r"-n/--workers: expected a positive integer or 'auto'"):
        validation.workers(value)


def test_workers_without_xdist_is_one_clear_line(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "xdist" else real(name, *a))
    with pytest.raises(ValueError, match=r"needs pytest-xdist, which is not installed"):
        validation.workers("2")


def test_require_names_a_known_capability():
    assert validation.capability("handoff") == "handoff"
    with pytest.raises(ValueError, match=r"--require: unknown capability 'handof'; did you mean handoff"):
        validation.capability("handof")


@pytest.mark.parametrize("argv, words", [
    (["--contract", "NOPE-001"], ["--contract: unknown contract id 'NOPE-001'"]),
    (["--contract", "handof-001"], ["did you mean HANDOFF-001"]),
    (["-n", "0"], ["-n/--workers"]),
    (["--require", "grpah"], ["--require: unknown capability 'grpah'"]),
    (["--json", "/no/such/folder/r.json"], ["--json: the folder '/no/such/folder' does not exist"]),
    (["--html", "."], ["--html: '.' is a directory"]),
    (["--json", ""], ["--json: empty path"]),
    (["--durations", "-1"], ["--durations: expected N >= 0"]),
    (["--profile", "ci", "--hypothesis-seed", "3"], ["--hypothesis-seed: the 'ci' profile is derandomized"]),
])
def test_bad_arguments_exit_2_before_the_engine_is_loaded(argv, words, capsys):
    # The engine cannot load (exit 4), so exit 2 shows the arguments were checked first.
    code = cli.main(["check", "--engine", "not_installed_pkg:Factory", *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and all(w in err for w in words), (code, err)


def test_a_json_path_that_is_a_pipe_or_stdout_is_taken(tmp_path, capsys):
    """The table comes back in memory, not read from the --json file: a pipe, `-` or /dev/stdout is a fine target (the
    run once read its JSON back and, on /dev/stdout piped on, waited on its own pipe). A missing folder and a
    directory are still refused."""
    import os

    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    for target in (str(fifo), "-", "/dev/stdout"):  # exit 4: past the argument checks, at the engine's load
        assert cli.main(["check", "--engine", "not_installed_pkg:Factory", "--json", target]) == 4, target
    assert cli.main(["check", "--engine", "not_installed_pkg:Factory", "--junitxml", "/dev/null"]) == 4
    assert "not_installed_pkg" in capsys.readouterr().err
    for target, words in ((str(tmp_path / "no" / "r.json"), "does not exist"), (str(tmp_path), "is a directory")):
        assert cli.main(["check", "--engine", "not_installed_pkg:Factory", "--json", target]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("dspark-contracts: --json: ") and words in err, err


def test_only_stdout_itself_is_stdout(tmp_path, monkeypatch):
    """`-`, and a path that is the file stdout writes to, take the JSON-on-stdout route; another file does not."""
    out, other = tmp_path / "out.txt", tmp_path / "other.json"
    other.write_text("")
    with open(out, "w") as f:
        monkeypatch.setattr("sys.stdout", f)
        assert cli._is_stdout("-") and cli._is_stdout(str(out)) and cli._is_stdout(f"/proc/self/fd/{f.fileno()}")
        assert not cli._is_stdout(str(other)) and not cli._is_stdout(str(tmp_path / "new.json"))
        assert not cli._is_stdout(None)


def test_argparse_errors_are_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["check", "--profile", "fast"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and "--profile" in err, err


def test_help_documents_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        cli.main(["check", "--help"])
    out = capsys.readouterr().out
    for code in "01234":
        assert f"\n  {code}  " in out, out


# ---- exit codes from a finished run ---------------------------------------------------------


def _run(*rows):
    counts = {"passed": 0, "failed": 0, "skipped": 0, "known-failure": 0}
    for _, result, _ in rows:
        counts[result] += 1
    return {"engine": "e", "counts": counts,
            "contracts": [{"id": i, "result": r, "requires": list(req)} for i, r, req in rows]}


@pytest.mark.parametrize("rows, require, allow, code", [
    ([("A-001", "passed", ["handoff"]), ("B-001", "skipped", ["step"])], [], False, 0),  # partial skips are fine
    ([("A-001", "skipped", ["handoff"])], [], False, 3),  # nothing ran
    ([("A-001", "skipped", ["handoff"])], [], True, 0),
    ([], [], False, 3),
    ([("A-001", "failed", ["handoff"]), ("B-001", "passed", ["step"])], [], True, 1),
    ([("A-001", "known-failure", ["verify"])], [], False, 0),
    ([("A-001", "passed", ["handoff"]), ("B-001", "skipped", ["step"])], ["step"], False, 3),
    ([("A-001", "passed", ["handoff"]), ("B-001", "skipped", ["step"])], ["handoff"], False, 0),
    ([("A-001", "passed", ["handoff"])], ["ranks"], True, 3),  # none requiring it ran
])
def test_exit_code_table(rows, require, allow, code):
    got, message = cli.exit_code(_run(*rows), require, allow)
    assert got == code, message
    assert bool(message) == (code != 0)


def test_dev_and_nightly_take_a_seed_even_when_ci_is_loaded():
    """Under CI=true Hypothesis loads its own derandomized 'ci' profile at import; profiles registered on top of it
    inherited that, and --profile dev --hypothesis-seed N then ran the same examples for every N."""
    from hypothesis import settings

    from contracts import profiles

    current = settings.get_current_profile_name()
    settings.load_profile("ci")  # derandomized, as CI's import leaves it
    try:
        profiles.register()
        assert not settings.get_profile("dev").derandomize and not settings.get_profile("nightly").derandomize
        assert settings.get_profile("ci").derandomize
    finally:
        settings.load_profile(current)


def test_a_reader_that_leaves_early_ends_the_output_quietly(monkeypatch):
    """`dspark-contracts list | head -1`: writing on a pipe whose reader left raised BrokenPipeError, a traceback."""
    import os
    import sys

    read, write = os.pipe()
    os.close(read)  # the reader has left
    with os.fdopen(write, "w") as out:
        monkeypatch.setattr(sys, "stdout", out)
        assert cli.main(["list"]) == 1  # and the rest of the output goes to /dev/null, not to a closed pipe


def test_a_stdout_that_cannot_be_written_is_one_line(monkeypatch, capsys):
    """`dspark-contracts list > /dev/full`: the failed write was a traceback (OSError: No space left on device)."""
    import sys

    with open("/dev/full", "w") as full:
        monkeypatch.setattr(sys, "stdout", full)
        assert cli.main(["list"]) == 1
    assert capsys.readouterr().err.strip() == "dspark-contracts: could not write to stdout: No space left on device"


def test_an_engine_error_of_the_os_kind_is_not_read_as_a_full_stdout(monkeypatch):
    """OSError is also what an engine raises for a missing file: only a failed stdout becomes the one line."""
    def missing(*args):
        raise FileNotFoundError(2, "No such file or directory", "/models/draft.safetensors")

    monkeypatch.setattr(cli, "_list", missing)  # the parser binds the command when main builds it
    with pytest.raises(FileNotFoundError, match="draft.safetensors"):
        cli.main(["list"])


@pytest.mark.parametrize("argv, style", [(["check"], "short"), (["check", "--tb", "long"], "long")])
def test_failure_tracebacks_are_short_unless_asked(argv, style):
    """The table under the tracebacks holds each violation and its repro line; pytest's default long tracebacks
    of the runner's frames buried it (about 100 lines a failure)."""
    args = cli.build_parser().parse_args(argv)
    cli._validate(args)
    out = cli._pytest_args(args, "reference")
    assert out[out.index("--tb") + 1] == style

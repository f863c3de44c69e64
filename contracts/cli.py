"""`dspark-contracts`: run the packaged contracts against an engine and print the table."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import warnings
from pathlib import Path

SUITE = Path(__file__).parent / "suite"
OK, FAILED, BAD_ARGS, NOTHING_RAN, ENGINE_ERROR = 0, 1, 2, 3, 4
EXIT_CODES = """exit codes:
  0  no contract failed, and at least one ran (passed, or failed as the known-failures ledger says)
  1  a contract failed, or the harness's own code raised (a harness error, not the engine's), or pytest stopped on
     an internal error, or a report or stdout could not be written
  2  bad arguments: unknown contract id or capability, bad -n, pytest-xdist missing, unusable output path,
     --device cuda without CUDA (--allow-no-gpu: exit 0, the GPU tier skipped), a --backend this machine cannot run,
     or a --device/--backend the engine does not take
  3  nothing ran: every selected contract was skipped (pass --allow-skips to accept that),
     or a --require'd capability had a contract skipped or none at all
  4  the engine could not be loaded, or its adapter is invalid (unknown capability, missing methods),
     or --strict-version and the engine's version is not one its pack was tested with
"""

CHECK_DESCRIPTION = """Run the packaged contracts against an engine. Prints one header line naming the engine and its version,
`engine NAME VERSION`, or `engine NAME VERSION (untested; tested: V1, V2)` when the engine pack was not tested at
that version (--strict-version refuses such a version instead), then pytest's progress and failures, then the
contract x result table. With --json - the JSON is stdout's only output and all of that goes to stderr.
"""


REPORT_DESCRIPTION = """Merge `check --json` results into one conformance matrix: engines as columns (each with its version,
the run's date and harness version, where it ran, its install line and what it accepts but no contract exercised),
contracts as rows (a known failure linked to its finding's repro and draft report, a skipped contract naming the
capability the engine lacks). Every input is checked before anything is written; an error names the file and field.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, like every other error of this command
        print(f"{self.prog}: {message} (see --help)", file=sys.stderr)
        sys.exit(BAD_ARGS)


class _StdoutFailed(Exception):
    """stdout could not be written (`list > /dev/full`), as opposed to an OSError of the engine or a report."""


def _out(line: str = "", flush: bool = False) -> None:
    try:
        if line:
            print(line)
        if flush:
            sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        raise _StdoutFailed(e.strerror or str(e)) from e


def _fail(message: str, code: int) -> int:
    print(f"dspark-contracts: {message}", file=sys.stderr)
    return code


def _write_failed(e: OSError, path: str) -> int:
    """A report that could not be written (a full disk): one line naming the file, exit 1."""
    return _fail(f"could not write {e.filename or path}: {e.strerror or e}", FAILED)


def _output_path(flag: str, path, stdout_ok: bool = False):
    """An output file whose folder exists: checked before anything runs or is written. With `stdout_ok`, `-` is
    stdout."""
    if path is None:
        return None
    if not path:
        raise ValueError(f"{flag}: empty path, expected a file path" + (" or -" if stdout_ok else ""))
    if stdout_ok and path == "-":
        return path
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{flag}: {path!r} is a directory, expected a file path")
    if not p.parent.is_dir():
        raise ValueError(f"{flag}: the folder {str(p.parent)!r} does not exist")
    return str(p)


def _pack(engine):
    """The engine's pack (its adapter class), imported without loading the engine, so that its placement options
    are checked with the other arguments; None when it cannot be imported (the engine's load then says why, exit 4)."""
    from contracts.engines import EngineLoadError, chosen_engine, pack_class

    try:
        return pack_class(chosen_engine(engine))
    except EngineLoadError:
        return None


def _is_stdout(path) -> bool:
    """`-`, or a path that is this process's stdout (`/dev/stdout`, `/proc/self/fd/1`, the file stdout is
    redirected to): the JSON is then written on stdout, and nothing else is."""
    if path == "-":
        return True
    if path is None:
        return False
    try:
        mine, theirs = os.fstat(sys.stdout.fileno()), os.stat(path)
    except (OSError, ValueError):  # no such file yet, or a stdout without a descriptor (captured in a test)
        return False
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)


def _validate(args) -> None:
    """Every argument, before pytest or the engine is imported; raises ValueError naming the flag. What needs no
    engine is checked first; then the engine's pack (its adapter class, not the engine, for the built-in packs) is
    imported for the one check that needs it: whether it takes the --backend."""
    from contracts import profiles, validation
    from contracts.registry import all_contracts

    if args.workers is not None:
        args.workers = validation.workers(args.workers)
    args.contract = validation.contract_ids(args.contract, all_contracts())
    args.require = [validation.capability(level) for level in args.require]
    if args.durations is not None and args.durations < 0:
        raise ValueError(f"--durations: expected N >= 0 (0 = all), got {args.durations}")
    for flag in ("json", "html", "junitxml"):
        setattr(args, flag, _output_path(f"--{flag}", getattr(args, flag), stdout_ok=flag == "json"))
    args.json_stdout = _is_stdout(args.json)
    if args.hypothesis_seed is not None:
        profile = args.profile or profiles.default_profile()
        if profile == "ci":  # Hypothesis ignores a seed when derandomize is on; say so rather than ignore it
            raise ValueError("--hypothesis-seed: the 'ci' profile is derandomized and ignores a seed; "
                             "add --profile dev or --profile nightly")
    if args.coverage:
        from contracts import reach

        missing = reach.coverage_missing()
        if missing:
            raise ValueError(missing)
        if args.workers not in (None, "1"):  # coverage follows one process and its rank processes, not xdist's
            raise ValueError("--coverage: measures one process and the rank processes it starts; drop -n")
    if args.coverage_baseline is not None:
        from contracts import reach

        if not args.coverage:
            raise ValueError("--coverage-baseline: compares a --coverage run with an earlier one; add --coverage")
        args.baseline_lines = reach.read_baseline(args.coverage_baseline)
    args.no_gpu = None
    try:  # the device (and CUDA) without the engine
        validation.placement(args.device, args.backend, pack=None)
    except validation.NoGpu as e:
        if not args.allow_no_gpu:
            raise
        args.no_gpu = str(e).split(": the GPU tier")[0]
        return
    args.pack = _pack(args.engine)  # read once: the backend check and the environment it sets both need it
    args.placement = validation.placement(args.device, args.backend, pack=args.pack)


def _pytest_args(args, spec: str) -> list:
    out = [str(SUITE), "-c", str(SUITE / "check.ini"), "--rootdir", str(SUITE), "--engine", spec,
           "-q", "--no-header", "-p", "no:randomly", "--disable-warnings",  # the table counts them (show: flag)
           # This process imported hypothesis and the plugin already (argument checks, engine load); neither
           # needs assertion rewriting, so pytest's warning about it is noise.
           "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    for cid in args.contract:
        out += ["--contract", cid]
    out += ["--contracts-device", args.placement.device, "--contracts-backend", args.placement.requested]
    if args.profile:
        out += ["--hypothesis-profile", args.profile]
    if args.hypothesis_seed is not None:
        out += ["--hypothesis-seed", str(args.hypothesis_seed)]
    if args.strict_version:  # xdist workers load the engine again
        out += ["--strict-version"]
    if args.hardening:
        out += ["--hardening"]
    if args.verbose:
        out += ["--contracts-verbose"]
    if args.show_engine_warnings:
        out += ["--contracts-show-warnings"]
    if args.workers:
        out += ["-n", args.workers]
    if args.junitxml:
        out += ["--junitxml", args.junitxml]
    if args.durations is not None:
        out += [f"--durations={args.durations}"]
    out += ["--tb", args.tb]
    shown_on = sys.stderr if getattr(args, "json_stdout", False) else sys.stdout  # where pytest's output goes
    if args.progress if args.progress is not None else shown_on.isatty():
        out += ["--contracts-progress", "-o", "console_output_style=classic"]  # lines, not dots and [NN%]
    return out


def exit_code(data: dict, require=(), allow_skips: bool = False) -> tuple:
    """(code, message) for a finished run's JSON, by the table in EXIT_CODES."""
    rows, counts = data["contracts"], data["counts"]
    errors = [r["id"] for r in rows if r["result"] == "harness-error"]
    failed = [r["id"] for r in rows if r["result"] == "failed"]
    if errors or failed:  # every one named: a harness error must not hide the engine's failures, nor they it
        parts = [f"{len(failed)} contract(s) failed: {', '.join(failed)}"] if failed else []
        if errors:  # the harness's own code raised: nothing was learnt about the engine from those contracts
            parts.append(f"{len(errors)} harness error(s) (the harness's own code raised, not the engine): "
                         f"{', '.join(errors)}")
        return FAILED, "; ".join(parts)
    for level in require:
        needing = [r for r in rows if level in r.get("requires", ())]
        skipped = [r["id"] for r in needing if r["result"] == "skipped"]
        if not needing:
            return NOTHING_RAN, f"--require {level}: no contract requiring it ran"
        if skipped:
            return NOTHING_RAN, f"--require {level}: skipped {', '.join(skipped)}"
    ran = counts["passed"] + counts["known-failure"]
    if ran == 0 and not allow_skips:
        return NOTHING_RAN, (f"nothing ran on engine {data['engine']}: {counts['skipped']} skipped, 0 passed "
                                "(--allow-skips accepts that)")
    return OK, ""


def _one_torch_thread() -> None:
    """Contract cases are tiny tensors, for which torch's intra-op thread pool costs more than it saves: with
    one thread the check needs about 2.5x less CPU, and on a busy 2-core machine it finishes 1.5-3x sooner.
    An explicit OMP_NUM_THREADS wins."""
    if os.environ.get("OMP_NUM_THREADS"):
        return
    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by xdist workers and DP rank processes
    import torch

    torch.set_num_threads(1)  # this process imported torch already (the argument checks load the catalog)


HYPOTHESIS_HOME = "DSPARK_HYPOTHESIS_HOME"  # read by the plugin, in this process and in xdist workers


def _hypothesis_home() -> str:
    """Where `check` keeps Hypothesis' files (its example database, its constants cache): a cache folder of the
    user's, not a `.hypothesis/` left in whatever directory the check ran from. $DSPARK_HYPOTHESIS_HOME wins."""
    if os.environ.get(HYPOTHESIS_HOME):
        return os.environ[HYPOTHESIS_HOME]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "dspark-contracts", "hypothesis")


@contextlib.contextmanager
def _placement_env(where, pack):
    """$DSPARK_DEVICE / $DSPARK_BACKEND (and what the pack adds: TRITON_INTERPRET=1 for the interpreter) while the
    check runs: the adapter, xdist workers and rank processes all read them. Restored afterwards (main() may run
    in-process)."""
    from contracts.validation import placement_env, restore_env, set_env

    saved = set_env({**placement_env(where, pack=pack), HYPOTHESIS_HOME: _hypothesis_home()})  # before the kernels
    try:
        yield
    finally:
        restore_env(saved)


def _check(args) -> int:
    try:
        with warnings.catch_warnings(record=True) as args.early_warnings:  # a pack's import: counted after the table
            _validate(args)
    except ValueError as e:
        return _fail(str(e), BAD_ARGS)
    if args.no_gpu:  # asked for: the GPU tier is skipped on this machine, as `pytest -m b300 --allow-no-gpu` does
        _out(f"dspark-contracts: GPU tier skipped (--allow-no-gpu): {args.no_gpu}")
        return OK
    if args.coverage:
        return _check_with_coverage(args)
    _one_torch_thread()
    with _placement_env(args.placement, args.pack):
        return _run_check(args)


def _write_fd(fd: int, text: str) -> None:
    data = text.encode()
    try:
        while data:
            data = data[os.write(fd, data):]
    except BrokenPipeError:
        raise
    except OSError as e:
        raise _StdoutFailed(e.strerror or str(e)) from e


def _write_file(f, text: str) -> None:
    try:
        f.write(text)
        f.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        raise _StdoutFailed(e.strerror or str(e)) from e


@contextlib.contextmanager
def _stdout_for_json(json_only: bool):
    """Yields the function that writes the JSON of `--json -`. With `json_only`, stdout is kept for that JSON alone:
    what the run prints (the version line, pytest's output, the notes) goes to stderr, and so, where stdout is a
    descriptor, does what reaches descriptor 1 itself (an engine's C code, xdist workers, rank processes)."""
    original = sys.stdout
    if not json_only:
        yield lambda text: _write_file(original, text)
        return
    try:
        fd, err_fd = original.fileno(), sys.stderr.fileno()
    except (OSError, ValueError):  # a stdout without a descriptor (captured in a test): Python's writes only
        with contextlib.redirect_stdout(sys.stderr):
            yield lambda text: _write_file(original, text)
        return
    original.flush()
    saved = os.dup(fd)
    os.dup2(err_fd, fd)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield lambda text: _write_fd(saved, text)
    finally:
        with contextlib.suppress(OSError):
            original.flush()  # what was written through the stdout object meanwhile goes to stderr too
        os.dup2(saved, fd)
        os.close(saved)


def _run_check(args) -> int:
    from contracts.engines import chosen_engine, from_cwd

    # A `module:factory` and what it imports, at load or later (a method's lazy import, xdist workers, which
    # copy this sys.path), are found from the current directory for the whole run, as under `python -m`.
    in_cwd = from_cwd() if ":" in chosen_engine(args.engine) else contextlib.nullcontext()
    with in_cwd, _stdout_for_json(args.json_stdout) as json_out:
        return _run_session(args, json_out)


def _run_session(args, json_out) -> int:
    import pytest

    from contracts.engines import EngineLoadError, chosen_engine, load_engine, version_line
    from contracts.plugin import Preloaded
    from contracts.validation import engine_placement

    spec = chosen_engine(args.engine)
    try:  # fail fast with one line; the session reuses this adapter instead of loading it again
        with warnings.catch_warnings(record=True) as loading:  # the engine's import warnings: counted after the table
            engine = load_engine(spec, strict_version=args.strict_version)
    except EngineLoadError as e:
        source = "" if args.engine or not os.environ.get("DSPARK_ENGINE") else " (the engine named by $DSPARK_ENGINE)"
        return _fail(f"{e}{source}", ENGINE_ERROR)
    try:
        engine_placement(engine, args.placement)
    except ValueError as e:
        return _fail(str(e), BAD_ARGS)
    _out(version_line(engine), flush=True)  # the header: `engine NAME VERSION`, and whether it was tested
    session = Preloaded(engine, [*getattr(args, "early_warnings", ()), *loading])  # takes the table back, in memory
    code = int(pytest.main(_pytest_args(args, spec), plugins=[session]))
    return _finish(args, engine, code, session.table, json_out)


_MEASURED_CHILD = "DSPARK_CONTRACTS_MEASURED_CHILD"  # set in the child `check --coverage` runs: its files are temporary


def _check_with_coverage(args) -> int:
    """`check --coverage`: the same check in a child process that coverage.py runs from its first line (the
    engine's module-level code counts, and the rank processes it starts through multiprocessing are measured too),
    then the rows per module the pack declares, added to the table, the JSON and the page."""
    import tempfile

    from contracts import reach
    from contracts.engines import EngineLoadError, chosen_engine, pack_class

    spec = chosen_engine(args.engine)
    try:
        modules = tuple(getattr(pack_class(spec), "coverage_modules", ()))
    except EngineLoadError as e:
        return _fail(str(e), ENGINE_ERROR)
    if not modules:
        return _fail(f"engine {spec!r}: --coverage needs its pack to declare coverage_modules", ENGINE_ERROR)
    missing = reach.missing_modules(modules)
    if missing:
        return _fail(f"engine {spec!r}: its pack's coverage_modules {', '.join(missing)} do not exist in the "
                     "installed engine", ENGINE_ERROR)
    with tempfile.TemporaryDirectory(prefix="dspark-contracts-coverage-") as tmp:
        run_json, page = os.path.join(tmp, "run.json"), os.path.join(tmp, "page.html")
        argv = _without(args.argv, "--coverage", "--coverage-baseline", "--json", "--html") + ["--json", run_json]
        argv += ["--html", page] if args.html else []  # the child adds the step pictures the page shows
        env = {**os.environ, _MEASURED_CHILD: "1"}
        with reach.measured_child(modules, tmp) as run:
            code = run([sys.executable, "-m", "contracts.cli", *argv], env=env,
                       stdout=sys.stderr if args.json_stdout else None)
        if not os.path.exists(run_json):
            return code
        with open(run_json) as f:
            data = json.load(f)
    data["coverage"] = [r.as_dict() for r in run.rows]
    data["coverage_lines"] = run.lines
    _out(f"\ncoverage of {spec}'s DSpark code (statements, branches):\n{reach.table(run.rows)}")
    if args.coverage_baseline is not None:
        data["coverage_new"] = reach.newly_covered(run.lines, args.baseline_lines)
        _out(f"against {args.coverage_baseline}: {reach.new_lines_table(data['coverage_new'])}")
    return _write_reports(args, data, code)


def _without(argv, *flags) -> list:
    """`argv` less each flag in `flags` and the value that follows it (`--json PATH`, `--json=PATH`, `--coverage`)."""
    out, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in flags:
            skip = "=" not in a and name != "--coverage"
            continue
        out.append(a)
    return out


def _finish(args, engine, code: int, table, json_out) -> int:
    """The exit code of a finished session, after writing the JSON and the HTML page if asked."""
    if code == ENGINE_ERROR:  # an xdist worker could not load the engine; pytest printed why
        return ENGINE_ERROR
    if code not in (0, 1, 5):
        return _fail(f"pytest stopped with exit code {code}", FAILED)
    if table is None:
        return _fail(f"no contract ran (ids: {', '.join(args.contract) or 'all'})", NOTHING_RAN)
    data = table.as_dict()
    if args.html:
        from contracts.step_sample import sample_steps

        data["step_sample"] = sample_steps(engine)
    return _write_reports(args, data, code, json_out)


def _write_reports(args, data: dict, code: int, json_out=None) -> int:
    """Write the JSON and the page a finished run asked for, and turn its table into the exit code."""
    written = {args.junitxml}  # pytest wrote it
    target = None
    try:
        if args.json and not args.json_stdout:
            target = args.json
            with open(args.json, "w") as f:
                json.dump(data, f, indent=2)
            written.add(args.json)
        if args.html:
            from contracts.html_report import write_html

            target = args.html
            write_html(args.html, [data])
            written.add(args.html)
    except OSError as e:  # a full disk
        return _write_failed(e, target)
    if args.json_stdout:  # the one document on stdout; the notes below go to stderr (_stdout_for_json)
        (json_out or _out)(json.dumps(data, indent=2) + "\n")
    for path in (args.json, args.junitxml, args.html):
        if path and path in written and _MEASURED_CHILD not in os.environ:  # the measured child's files are temporary
            _out(f"dspark-contracts: wrote {path}")
    result, message = exit_code(data, args.require, args.allow_skips)
    if code == 1 and result == OK:  # pytest saw a failure the table does not hold
        result, message = FAILED, "pytest reported a failure outside the contract table"
    return _fail(message, result) if message else result


def _report(args) -> int:
    """Every input read and checked, both outputs rendered, then written: a bad input or path writes nothing."""
    from contracts import conformance
    from contracts.html_report import link_base_for, render

    try:
        if not (args.html or args.json):
            raise ValueError("report: nothing to write; add --html PATH and/or --json PATH")
        html, out_json = _output_path("--html", args.html), _output_path("--json", args.json)
        matrix = conformance.merge(args.runs)
        texts = []
        if out_json:
            texts.append((out_json, json.dumps(matrix, indent=2) + "\n"))
        if html:
            base = args.link_base.rstrip("/") + "/" if args.link_base else link_base_for(html)
            texts.append((html, render(matrix, base)))
    except ValueError as e:
        return _fail(str(e), BAD_ARGS)
    for path, text in texts:
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:  # the arguments were fine; the disk was not
            return _write_failed(e, path)
    columns = ", ".join(e["column"] for e in matrix["engines"])
    for path, _ in texts:
        _out(f"dspark-contracts: wrote {path} ({len(matrix['engines'])} engine(s): {columns})")
    return OK


LIST_LEGEND = ("[...]: the capabilities an engine's pack must declare for the contract to run (else it is skipped); "
               "docs/contracts.md has each one's statement, docs/writing-an-adapter.md what each capability promises")


def _on_engine(contract, pack) -> str:
    """What `check --engine` would do with `contract`, read from the pack's declarations (the engine not loaded)."""
    missing = sorted(contract.requires - set(pack.capabilities))
    if missing:
        return "skipped: lacks " + ", ".join(missing)
    if contract.id in getattr(pack, "hardening", {}):
        return "hardening (runs with --hardening)"
    if any(e.contract_id == contract.id for e in getattr(pack, "known_failures", ())):
        return "runs (known failure in the ledger)"
    return "runs"


def _list(args) -> int:
    from contracts.engines import EngineLoadError, chosen_engine, pack_class
    from contracts.registry import all_contracts

    contracts = list(all_contracts().values())
    pack = None
    if args.engine:
        try:
            pack = pack_class(chosen_engine(args.engine))
        except EngineLoadError as e:
            return _fail(str(e), ENGINE_ERROR)
    if pack is not None:
        _out(f"{len(contracts)} contracts, and what `check --engine {args.engine}` does with each: runs, runs as a known "
             "failure, hardening, or skipped for the capability named (read from its pack; the engine is not loaded)")
        _out(f"{'contract':<12} {'on ' + args.engine:<40} statement")
        for c in contracts:
            _out(f"{c.id:<12} {_on_engine(c, pack):<40} {c.statement}")
        runs = sum(_on_engine(c, pack).startswith("runs") for c in contracts)
        _out(f"{runs} of {len(contracts)} run on {args.engine}")
        return OK
    _out(f"{len(contracts)} contracts. {LIST_LEGEND}")
    _out(f"{'contract':<12} [requires] statement")
    for c in contracts:
        _out(f"{c.id:<12} [{', '.join(sorted(c.requires))}] {c.statement}")
    return OK


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dspark-contracts", description=__doc__, epilog=EXIT_CODES,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_harness_version()}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    check = sub.add_parser("check", help="run the contracts against an engine and print the contract x result table",
                           description=CHECK_DESCRIPTION, epilog=EXIT_CODES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("--engine", help="entry point name or module:factory (default: $DSPARK_ENGINE, else reference)")
    check.add_argument("--contract", action="append", default=[], metavar="ID",
                       help="only this contract (repeatable, any case)")
    check.add_argument("--require", action="append", default=[], metavar="LEVEL",
                       help="exit 3 unless every contract needing this capability ran (repeatable)")
    check.add_argument("--allow-skips", action="store_true", help="exit 0 even when every contract was skipped")
    check.add_argument("--device", metavar="cpu|cuda",
                       help="where the verify level runs (default: $DSPARK_DEVICE, else cpu); cuda needs a CUDA device")
    check.add_argument("--backend", metavar="torch|triton|auto",
                       help="verify ops: the torch reference or the Triton kernels (interpreted on cpu, compiled on "
                            "cuda); auto = triton on cuda, torch on cpu (default: $DSPARK_BACKEND, else auto)")
    check.add_argument("--allow-no-gpu", action="store_true",
                       help="with --device cuda on a machine without CUDA: say the GPU tier is skipped and exit 0, "
                            "instead of refusing (exit 2)")
    check.add_argument("-v", "--verbose", action="store_true",
                       help="under each known failure, its ledger evidence and repro line (the JSON and HTML hold them "
                            "always)")
    check.add_argument("--show-engine-warnings", action="store_true",
                       help="print every distinct warning raised while the contracts ran, in full (default: counted "
                            "in one line after the table)")
    check.add_argument("--hardening", action="store_true",
                       help="also run the contracts that are hardening on this engine: inputs its own producers never "
                            "emit (listed apart, never findings; without the flag they are listed, not run)")
    check.add_argument("--coverage-baseline", metavar="JSON",
                       help="with --coverage: the --json of an earlier --coverage run; report the engine lines this "
                            "run covers that it did not (e.g. a nightly run against CI's)")
    check.add_argument("--coverage", action="store_true",
                       help="measure statement and branch coverage of the engine's DSpark code (the modules its pack "
                            "declares), rank processes included; needs coverage.py (pip install coverage)")
    check.add_argument("--strict-version", action="store_true",
                       help="refuse (exit 4, one line) an engine version its pack was not tested with; without it, such "
                            "a version runs and the header says so: 'engine NAME VERSION (untested; tested: ...)'")
    check.add_argument("--profile", choices=("dev", "ci", "nightly"), help="Hypothesis profile (default: ci under CI, else dev)")
    check.add_argument("--hypothesis-seed", type=int, metavar="N", help="Hypothesis seed (dev and nightly profiles)")
    check.add_argument("-n", "--workers", metavar="N", help="run on N pytest-xdist workers ('auto' for one per core)")
    check.add_argument("--json", metavar="PATH",
                       help="also write the table as JSON (engine, its version and tested versions, profile, failures); "
                            "'-' (or /dev/stdout) writes it on stdout, which then holds the JSON only: the version line, "
                            "progress, tracebacks, the table and the 'wrote' notes go to stderr")
    check.add_argument("--html", metavar="PATH", help="also write a self-contained HTML conformance page")
    check.add_argument("--junitxml", metavar="PATH", help="also write JUnit XML (pytest's --junitxml)")
    check.add_argument("--durations", type=int, metavar="N", help="list the N slowest phases (pytest's --durations; 0 = all)")
    check.add_argument("--tb", choices=("short", "long", "auto", "line", "native", "no"), default="short",
                       help="traceback style of a failure, as pytest's --tb (default short: the table below it "
                            "already holds each violation's expected/observed and repro line)")
    check.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                       help="one line per contract as it finishes (default: when stdout, or stderr under --json -, "
                            "is a terminal)")
    check.set_defaults(func=_check)
    report = sub.add_parser("report", help="merge `check --json` results into one conformance matrix (engines as "
                            "columns, contracts as rows), as an HTML page and/or JSON", description=REPORT_DESCRIPTION,
                            epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    report.add_argument("runs", nargs="+", metavar="RUN.json",
                        help="`check --json` files, one column each, in this order (a matrix written by --json counts "
                             "as its columns)")
    report.add_argument("--html", metavar="PATH", help="write the self-contained conformance page")
    report.add_argument("--json", metavar="PATH", help="write the same matrix as JSON")
    report.add_argument("--link-base", metavar="URL",
                        help="put the repository's findings/ and docs/ files under this URL (e.g. the repository at a "
                             "commit) instead of linking them relative to the page's folder")
    report.set_defaults(func=_report)
    listing = sub.add_parser("list", help="list the contracts", description="List every contract: its id, the "
                             "capabilities it needs and its statement; with --engine, what check would do with each on "
                             "that engine.", epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    listing.add_argument("--engine", help="say which contracts run on this engine (entry point name or "
                                          "module:factory), read from its pack without loading the engine")
    listing.set_defaults(func=_list)
    return parser


def _harness_version() -> str:
    from contracts import __version__

    return __version__


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # bare `dspark-contracts`: what it can do, not an error
        parser.print_help()
        return OK
    args.argv = list(sys.argv[1:] if argv is None else argv)  # `check --coverage` runs them again, measured
    try:
        code = args.func(args)
        _out(flush=True)  # a write that fails (a full disk) fails here, not in the interpreter's exit
        return code
    except BrokenPipeError:  # `dspark-contracts list | head`: the reader left; say nothing more (Python's recipe)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except _StdoutFailed as e:  # one line, not a traceback; what is left of stdout goes nowhere (the exit's
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # flush would fail again)
        return _fail(f"could not write to stdout: {e}", FAILED)


if __name__ == "__main__":
    sys.exit(main())

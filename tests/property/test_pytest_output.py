"""What a plain pytest run prints around the contracts: an engine's failure as its violation (not the harness's
frames), the header's backend, which skips are expected."""

import textwrap

import pytest

from tests import inprocess

# An engine whose finalize leaves -1 where the bonus belongs: LOSSLESS-003 fails on the engine's output.
PACK = textwrap.dedent("""
    import torch
    from contracts.adapters.reference import ReferenceAdapter
    from contracts.boundary.verify import CommitResult

    class Placeholder(ReferenceAdapter):
        name = "placeholder"

        def finalize(self, inputs, accept):
            r = super().finalize(inputs, accept)
            out = r.out_tokens.clone()
            out[torch.arange(out.shape[0]), r.commit_len - 1] = -1
            return CommitResult(r.commit_len, r.new_seq_lens, out)
""")


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pytest_output")
    (folder / "po_pack.py").write_text(PACK)
    return folder


def _suite(pack, *flags):
    return inprocess.pytest_run("-p", "no:cacheprovider", "--pyargs", "contracts.suite", "--engine",
                                "po_pack:Placeholder", "--contract", "LOSSLESS-003", *flags, env={"CI": "true"},
                                path=[pack])


def test_an_engines_failure_under_the_default_traceback_is_its_violation_once(pack):
    p = _suite(pack)
    assert p.returncode == 1, p.stdout[-3000:]
    failures = p.stdout.split(" FAILURES ")[1].split(" dspark contracts ")[0]
    assert "out_tokens[0, 0] (within commit_len 1): expected a token id in [0, 8)" in failures, failures
    assert "repro: dspark-contracts check --engine po_pack:Placeholder --contract LOSSLESS-003" in failures
    assert "def _call" not in failures and "runner.py" not in failures, failures  # no harness frames
    assert len(failures.splitlines()) <= 6, failures


def test_an_explicit_tb_keeps_pytests_traceback(pack):
    p = _suite(pack, "--tb=short")
    assert p.returncode == 1, p.stdout[-3000:]
    assert "runner.py" in p.stdout.split(" FAILURES ")[1], p.stdout


@pytest.mark.parametrize("engine, backend", [("reference", "backend=auto (torch for reference)"),
                                             ("sglang", "backend=the engine's own")])
def test_the_header_names_the_backend_the_chosen_engine_resolves(engine, backend):
    p = inprocess.pytest_run("-p", "no:cacheprovider", "--co", "--pyargs", "contracts.suite", "--engine", engine,
                             "--contract", "VERIFY-003")
    header = next(line for line in p.stdout.splitlines() if line.startswith("engine: "))
    assert backend in header and "reference engine" not in header, header


# A test skipped as an uninstalled engine's are, and a pack whose ledger knows SCALE-001 and which lists DPSYNC-001 as
# hardening: pytest's last line must count them as the table does.
_SESSION = """
    import pytest
    from contracts.ledger import KnownFailure
    pytest_plugins = ['contracts.plugin']

    @pytest.fixture(autouse=True)
    def pretend(monkeypatch, engine):
        monkeypatch.setattr(engine, "known_failures", (KnownFailure("reference", "==" + engine.version, "SCALE-001",
                                                                    "scaled", "evidence: pretend"),))
        monkeypatch.setattr(engine, "hardening", {"DPSYNC-001": "pretend"}, raising=False)
        import dspark.spec_info as si
        monkeypatch.setattr(si, "spec_scale_global_num_tokens", lambda w, g, l: ([x + 1 for x in g], list(l)))
"""


def test_skips_are_counted_by_reason_and_pytests_counts_match_the_table(pytester):
    pytester.makeconftest(_SESSION)
    pytester.makepyfile(test_x="from contracts.suite.test_contracts import test_contract",
                        test_y="import pytest\n@pytest.mark.parametrize('i', range(3))\n"
                               "def test_engine(i):\n    pytest.skip('fooengine is not installed; run `x`')\n")
    result = pytester.runpytest("-k", "SCALE-001 or DPSYNC-001 or VERIFY-003 or test_engine", "-p", "no:cacheprovider")
    out = result.stdout.str()
    assert "3 skipped, by reason (a test of an engine or a device this machine lacks skips by design" in out, out
    assert "     3  fooengine is not installed; run `x`" in out, out
    assert "SKIPPED [" not in out  # one line per reason, not per test
    table = next(line for line in result.stdout.lines if line.startswith("engine=reference ") and " on " in line)
    assert "1 passed, 0 failed, 0 skipped, 1 known failures, 1 hardening not run" in table, table
    last = result.stdout.lines[-1]
    assert "1 passed" in last and "3 skipped" in last and "1 known failures" in last and "1 hardening not run" in last, last
    # Among other tests the table lists only the rows to read: the known failure, not VERIFY-003's pass.
    assert any(line.startswith("SCALE-001 ") for line in result.stdout.lines)
    assert not any(line.startswith("VERIFY-003 ") for line in result.stdout.lines), out

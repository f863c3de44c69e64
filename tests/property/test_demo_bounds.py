"""Every demo knob has stated bounds (in --help); a value outside them is one line naming the knob, exit 2, before
anything is built (`--gamma 65` was a 28-line traceback, `--vocab 100000000` a petabyte allocation)."""

import pytest

from dspark import demo


@pytest.mark.parametrize("flag", sorted(demo.BOUNDS))
def test_each_bound_is_enforced_on_both_sides_and_stated_in_help(flag, capsys, monkeypatch):
    monkeypatch.setattr(demo, "build", lambda args: pytest.fail("built the engine for an out-of-bounds knob"))
    low, high, _ = demo.BOUNDS[flag]
    for value in (low - 1, high + 1):
        assert demo.main([flag, str(value)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.strip().splitlines()) == 1 and err.startswith(f"dspark.demo: {flag}: must lie in ["), err
    with pytest.raises(SystemExit):
        demo.main(["--help"])
    assert f"in [{low}, " in capsys.readouterr().out


@pytest.mark.parametrize("argv, flag", [
    (["--gamma", "65"], "--gamma"),
    (["--vocab", "100000000"], "--vocab"),
    (["--bs", "1000000"], "--bs"),
    (["--max-new", "10000000"], "--max-new"),
    (["--temperature", "1e9"], "--temperature"),
    (["--temperature", "inf"], "--temperature"),
])
def test_the_reported_cases_are_one_line(argv, flag, capsys):
    assert demo.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and flag in err and "Traceback" not in err, err


def test_the_edges_themselves_run(capsys):
    assert demo.main(["--gamma", str(demo.BOUNDS["--gamma"][1]), "--max-new", "2", "--vocab", "8"]) == 0
    assert "greedy output == plain greedy decoding of the target: True" in capsys.readouterr().out

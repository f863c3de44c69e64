"""The demo's knobs, progress bar and listings (in-process)."""

import re

import pytest

from dspark import demo


@pytest.mark.parametrize("argv, flag", [
    (["--temperature", "-1"], "--temperature"),
    (["--temperature", "nan"], "--temperature"),
    (["--max-new", "0"], "--max-new"),
    (["--gamma", "0"], "--gamma"),
    (["--bs", "0"], "--bs"),
    (["--budget-frac", "2"], "--budget-frac"),
    (["--budget-frac", "0"], "--budget-frac"),
    (["--vocab", "1"], "--vocab"),
    (["--quiet-above", "-1"], "--quiet-above"),
    (["--gamma", "x"], "--gamma"),
    (["--mode", "dynamic"], "--mode"),
    (["--seed", "-1"], "--seed"),
    (["--seed", str(2 ** 70)], "--seed"),  # was torch's "Overflow when unpacking long long", no flag named
])
def test_a_bad_knob_is_one_line_naming_it(argv, flag, capsys):
    try:
        code = demo.main(argv)
    except SystemExit as e:  # argparse's own type and choice errors
        code = e.code
    out, err = capsys.readouterr()
    assert code == 2 and out == "", (code, out)
    assert len(err.strip().splitlines()) == 1 and flag in err and "Traceback" not in err, err


def test_bs_zero_says_why(capsys):
    assert demo.main(["--bs", "0"]) == 2
    assert "at least one request" in capsys.readouterr().err


def test_progress_bar_reaches_the_tokens_emitted_and_the_listing_says_what_it_left_out(capsys):
    assert demo.main(["--bs", "12", "--quiet-above", "4", "--max-new", "6"]) == 0
    out, err = capsys.readouterr()
    final = err.replace("\r", "\n").strip().splitlines()[-1]
    shown = re.findall(r"^request (\d+): prompt .* -> (\[.*\])$", out, re.M)
    assert len(shown) == demo.SHOWN_REQUESTS
    emitted = sum(len(eval(tokens)) for _, tokens in shown)  # noqa: S307 - our own printed lists
    assert emitted == demo.SHOWN_REQUESTS * 6  # no EOS in the demo: every request emits --max-new tokens
    assert "100%" in final and re.search(r"\b72/72\b", final), final
    assert "... and 8 more requests" in out


def test_short_runs_list_every_request_and_show_steps(capsys):
    assert demo.main(["--bs", "2", "--max-new", "5"]) == 0
    out = capsys.readouterr().out
    assert "more requests" not in out and len(re.findall(r"^request \d+:", out, re.M)) == 2
    assert re.search(r"^step +\d+ +bs=2 ", out, re.M) and "greedy output == plain greedy decoding of the target: True" in out


def test_a_run_without_decode_steps_reports_no_tau(capsys):
    assert demo.main(["--max-new", "1"]) == 0  # the prefill's token is the only one: no verify, tau undefined
    out = capsys.readouterr().out
    assert "0 steps: every request ended at its prefill" in out and "tau = 0" not in out

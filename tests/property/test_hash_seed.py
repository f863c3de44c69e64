"""Toy models are functions of their seeds, not of the process: a str's hash() changes with PYTHONHASHSEED.

The SGLang step level seeded its drafter's tables with hash(drafter name), so every process built another draft
model (DIST-001's sample and its time moved from run to run, and a failure did not replay from its repro line).
"""

import pytest

from tests.hermetic import run_python

CODE = ("import hashlib\n"
        "from contracts.adapters.sglang.step import AGREEMENT, models\n"
        "for drafter in sorted(AGREEMENT):\n"
        "    m = models(8, 5, drafter)\n"
        "    print(drafter, hashlib.md5(m.draft_bias.numpy().tobytes() + m.lm_head.numpy().tobytes()).hexdigest())\n")


@pytest.mark.e2e  # two new interpreters
def test_the_sglang_step_levels_models_do_not_follow_the_hash_seed():
    outs = []
    for seed in ("1", "2"):
        run = run_python("-c", CODE, env={"PYTHONHASHSEED": seed})
        assert run.returncode == 0, run.stderr[-2000:]
        outs.append(run.stdout)
    assert outs[0] == outs[1], outs

"""The README's two fresh-machine commands are what CI runs, word for word."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _quick_start_commands() -> list:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def test_ci_runs_the_readme_commands_verbatim():
    commands = _quick_start_commands()
    assert len(commands) == 2, commands
    main_job, tests = commands
    assert "dspark-contracts check" in main_job and re.search(r"(^|&& )pytest -m cpu$", tests), commands
    ci = (ROOT / ".ci" / "run").read_text()
    for command in commands:
        assert f"bash -c '{command}'" in ci, f".ci/run does not run the README command verbatim: {command}"

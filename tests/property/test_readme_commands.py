"""The README's two fresh-machine commands are what CI runs, word for word; every other CI step is documented."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# CI steps other than the quick start: the page that documents each, and fragments that must appear both in the
# step's command in .ci/run and in that page (so a renamed flag or script fails here, not in a reader's shell).
DOCUMENTED = {
    "e2e tests": ("docs/cli.md", ["pytest -m e2e"]),
    "triton check": ("docs/gpu.md", ["dspark-contracts check --backend triton"]),
    "sglang install": ("docs/engines/sglang.md", ["bash scripts/install_sglang.sh"]),
    "sglang check": ("docs/engines/sglang.md", ["dspark-contracts check --engine sglang"]),
    "sglang-chain check": ("docs/engines/sglang.md", [
        "dspark-contracts check --engine sglang-chain --contract VERIFY-001 --contract VERIFY-002 "
        "--contract VERIFY-011 --contract VERIFY-012"]),
    "sglang-pd check": ("docs/engines/sglang.md", [
        "dspark-contracts check --engine sglang-pd --contract LOOP-001 --contract LOOP-002 --contract LOOP-003 "
        "--contract LOOP-004 --contract LOOP-005 --contract LOOP-006 --contract LOOP-007 --contract DIST-002"]),
    "sglang meta-tests": ("docs/engines/sglang.md", ["pytest -q -p no:cacheprovider tests/sglang"]),
    "vllm venv": ("docs/engines/vllm.md", ["python -m venv", "torch==2.13.0", ".[test]"]),
    "vllm install": ("docs/engines/vllm.md", ["bash scripts/install_vllm.sh"]),
    "vllm check": ("docs/engines/vllm.md", ["check --engine vllm"]),
    "vllm meta-tests": ("docs/engines/vllm.md", ["-q -p no:cacheprovider tests/vllm"]),
    "sglang findings": ("findings/README.md", ["bash findings/run_all.sh sglang"]),
    "vllm findings": ("findings/README.md", ["bash findings/run_all.sh vllm"]),
    "deepspec venv": ("docs/engines/deepspec.md", ["python -m venv", "torch==2.13.0", ".[test]"]),
    "deepspec install": ("docs/engines/deepspec.md", ["bash scripts/install_deepspec.sh"]),
    "deepspec check": ("docs/engines/deepspec.md", ["check --engine deepspec"]),
    "deepspec meta-tests": ("docs/engines/deepspec.md", ["-q -p no:cacheprovider tests/deepspec"]),
    "deepspec findings": ("findings/README.md", ["bash findings/run_all.sh deepspec"]),
    "vllm-dspark venv": ("docs/engines/vllm-dspark.md", ["python -m venv", "torch==2.13.0", ".[test]"]),
    "vllm-dspark install": ("docs/engines/vllm-dspark.md", ["bash scripts/install_vllm_dspark.sh"]),
    "vllm-dspark check": ("docs/engines/vllm-dspark.md", ["check --engine vllm-dspark"]),
    "vllm-dspark meta-tests": ("docs/engines/vllm-dspark.md", ["-q -p no:cacheprovider tests/vllm_dspark"]),
    "conformance report": ("docs/cli.md", ["dspark-contracts report", "--html", "--json"]),
}
QUICK_START = ("main job", "tests")


def _flat(text: str) -> str:
    return " ".join(text.replace("\\\n", " ").split())


def _quick_start_commands() -> list:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def _ci_steps() -> dict:
    """{step name: its command} from .ci/run's `step "NAME" COMMAND` lines (continuations joined)."""
    text = (ROOT / ".ci" / "run").read_text().replace("\\\n", " ")
    return {m.group(1): _flat(m.group(2)) for m in re.finditer(r'^step "([^"]+)" (.*)$', text, re.M)}


def test_ci_runs_the_readme_commands_verbatim():
    commands = _quick_start_commands()
    assert len(commands) == 2, commands
    main_job, tests = commands
    assert "dspark-contracts check" in main_job and re.search(r"(^|&& )pytest -m cpu$", tests), commands
    ci = (ROOT / ".ci" / "run").read_text()
    for command in commands:
        assert f"bash -c '{command}'" in ci, f".ci/run does not run the README command verbatim: {command}"


def test_every_other_ci_step_is_documented():
    steps = _ci_steps()
    assert set(QUICK_START) <= set(steps), sorted(steps)
    undocumented = sorted(set(steps) - set(QUICK_START) - set(DOCUMENTED))
    assert not undocumented, f".ci/run steps with no documenting page (add them to DOCUMENTED): {undocumented}"
    for name, (page, fragments) in DOCUMENTED.items():
        assert name in steps, f"DOCUMENTED names a step .ci/run no longer has: {name!r}"
        doc = _flat((ROOT / page).read_text())
        for fragment in fragments:
            assert fragment in steps[name], f".ci/run step {name!r} no longer runs {fragment!r}: {steps[name]}"
            assert fragment in doc, f"{page} does not show what .ci/run step {name!r} runs: {fragment!r}"


def test_the_deepspec_page_names_one_engine_and_how_to_get_its_tree():
    """A fresh clone has no DeepSpec tree: the page must say how to get it at the commit the pack was tested with,
    and its heading must name the `--engine` its commands run."""
    from contracts.adapters.deepspec.env import DEEPSPEC_COMMIT

    text = (ROOT / "docs" / "engines" / "deepspec.md").read_text()
    heading = re.findall(r"`--engine ([^`]+)`", text.splitlines()[0])
    commands = set(re.findall(r"check --engine ([^\s`]+)", _flat(text)))
    assert heading == ["deepspec"] and commands == {"deepspec"}, (heading, commands)
    assert "git clone https://github.com/deepseek-ai/DeepSpec ../shared/engines/deepspec" in text
    assert f"checkout {DEEPSPEC_COMMIT}" in text

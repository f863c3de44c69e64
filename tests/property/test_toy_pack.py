"""Adding an engine edits no core file: a toy engine pack, written here into a scratch folder with its own entry
point, is found, loaded, run and reported by `dspark-contracts check`, and no file under `contracts/` changes.

The toy engine is a real (if small) verify level in plain torch: greedy accept, finalize and chain rejection sampling
with its own seeded generator. Only the greedy contracts are asked of it here."""

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

TOY_PACK = '''
"""A toy engine pack: the verify level in plain torch, one class."""

import torch

from contracts import protocol
from contracts.boundary.verify import AcceptResult, CommitResult


class ToyAdapter:
    name = "toy"
    version = "1.1"
    device = "cpu"
    capabilities = frozenset({protocol.VERIFY})
    tested_versions = ("1.0",)
    known_failures = ()

    def greedy_accept(self, inputs):
        lens = inputs.lens()
        argmax = inputs.target_logits.argmax(-1)  # ties to the lowest index
        match = (inputs.drafts == argmax[:, :-1]).to(torch.int64)
        raw = match.cumprod(-1).sum(-1)
        correct = torch.minimum(raw, lens - 1)
        bonus = argmax.gather(1, correct[:, None])[:, 0]
        return AcceptResult(correct, bonus, raw - correct)

    def finalize(self, inputs, accept):
        commit = accept.correct_len + 1
        out = torch.full_like(inputs.candidates, -1)
        for r in range(inputs.bs):
            n = int(accept.correct_len[r])
            out[r, :n] = inputs.drafts[r, :n]
            out[r, n] = accept.bonus[r]
        return CommitResult(commit, inputs.prefix_lens + commit, out)

    def sample_block(self, inputs, seed):
        gen = torch.Generator().manual_seed(seed)
        p = inputs.target_probs.double()
        q = None if inputs.draft_probs is None else inputs.draft_probs.double()
        correct, bonus, lens = [], [], inputs.lens()
        for r in range(inputs.bs):
            n = 0
            while n < int(lens[r]) - 1:
                d = int(inputs.drafts[r, n])
                qd = 1.0 if q is None else float(q[r, n, d])
                if float(torch.rand((), generator=gen, dtype=torch.float64)) * qd >= float(p[r, n, d]):
                    break
                n += 1
            residual = p[r, n].clone()
            if n < int(lens[r]) - 1:  # rejected: the residual max(p - q, 0)
                residual -= torch.nn.functional.one_hot(inputs.drafts[r, n], residual.numel()).double() if q is None \\
                    else q[r, n]
                residual = residual.clamp(min=0)
            correct.append(n)
            bonus.append(int(torch.multinomial(residual / residual.sum(), 1, generator=gen)))
        correct = torch.tensor(correct)
        return AcceptResult(correct, torch.tensor(bonus), torch.zeros_like(correct))
'''


def _tree_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _install_toy(where: Path) -> None:
    """The pack as a pip install leaves it: the package and a dist-info folder declaring its entry point."""
    (where / "toy_dspark_pack").mkdir()
    (where / "toy_dspark_pack" / "__init__.py").write_text(textwrap.dedent(TOY_PACK))
    info = where / "toy_dspark_pack-1.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-dspark-pack\nVersion: 1.1\n")
    (info / "entry_points.txt").write_text("[dspark_contracts.engines]\ntoy = toy_dspark_pack:ToyAdapter\n")


@pytest.mark.e2e
def test_a_toy_pack_loads_runs_and_reports_without_a_core_edit(tmp_path):
    _install_toy(tmp_path)
    before = _tree_digest(ROOT / "contracts")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "CI": "true"}
    out = tmp_path / "run.json"
    run = subprocess.run([sys.executable, "-m", "contracts.cli", "check", "--engine", "toy", "--contract", "VERIFY-003",
                          "--contract", "VERIFY-004", "--contract", "VERIFY-008", "--json", str(out)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "engine toy 1.1 (untested; tested: 1.0)" in run.stdout, run.stdout[-2000:]
    rows = {r["id"]: r["result"] for r in json.loads(out.read_text())["contracts"]}
    assert rows == {"VERIFY-003": "passed", "VERIFY-004": "passed", "VERIFY-008": "passed"}, rows
    assert _tree_digest(ROOT / "contracts") == before, "running a new pack changed a file under contracts/"


def test_the_toy_pack_is_listed_among_the_engines(tmp_path):
    _install_toy(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    code = "from contracts.engines import engine_names; print(engine_names())"
    names = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60).stdout
    assert "'toy'" in names and "'reference'" in names, names

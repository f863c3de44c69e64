"""LOOP-004 / LOOP-002 (DeepSpec afdfa7c9, deepspec/eval/base_evaluator.py): the decode loop runs one more
propose + verify round after the output already holds max_new_tokens tokens, and throws that round's tokens away.

generate_decoding_sample keeps `start` at the pending anchor, output_ids[start], which is already an emitted token
(the prefill's first token, then each round's bonus). Its loop runs `while start < max_length` with
max_length = num_input_tokens + max_new_tokens, so when a round ends with exactly max_new_tokens tokens out
(start == max_length - 1) it drafts a block and runs the target over it once more; the final trim
(`output_ids[:, :min(start + 1, max_length)]`) drops everything that round committed. The round still lands in
acceptance_lengths, proposal_lengths and verify_count, which the evaluator's accept_len and verify_rate average.

Case: a random 2-layer Qwen3 target (vocab 8) and a 1-layer DSpark drafter (block 3, vanilla Markov head,
confidence head), greedy, prompt [1, 2], max_new_tokens 1: the prefill emits the one token; DeepSpec then runs a
full round (verify_count 1) that emits nothing.

    V=${TMPDIR:-/tmp}/dspark-contracts-deepspec-venv
    $V/bin/python findings/deepspec/loop_004_round_after_max_new_tokens.py             # exits 1
    $V/bin/python findings/deepspec/loop_004_round_after_max_new_tokens.py --with-fix  # exits 0

DeepSpec is imported from $DSPARK_DEEPSPEC_PATH, else ../shared/engines/deepspec from the repository root. Imports
only the standard library, torch, transformers and DeepSpec; the evaluator's callbacks are DeepSpec's own
(Qwen3DSparkEvaluator._init_context / _propose / _update on an evaluator built without its distributed setup).
"""

import argparse
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

FINDING = "LOOP-004"
AFFECTED = "afdfa7c9382a3341a3e6f17756dd816da79f132c"
VOCAB, BLOCK, PROMPT = 8, 3, [1, 2]


def deepspec_root() -> Path:
    env = os.environ.get("DSPARK_DEEPSPEC_PATH")
    return Path(env).resolve() if env else Path(__file__).resolve().parents[2].parent / "shared" / "engines" / "deepspec"


def require_version(root: Path) -> None:
    commit = None
    if (root / ".git").exists():
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
        commit = done.stdout.strip() or None
    elif (root / "PROVENANCE.md").is_file():
        found = re.search(r"\bcommit ([0-9a-f]{40})\b", (root / "PROVENANCE.md").read_text())
        commit = found.group(1) if found else None
    if commit != AFFECTED:
        print(f"{FINDING}: DeepSpec at {root} is {commit or 'not found'}; this repro applies to commit {AFFECTED[:12]} only")
        sys.exit(2)
    sys.path.insert(0, str(root))


def apply_fix():
    """Minimal correction: loop while start + 1 < max_length (output_ids[start] is already emitted)."""
    from deepspec.eval import base_evaluator as be

    source = inspect.getsource(be.generate_decoding_sample)
    old, new = "    while start < max_length:\n", "    while start + 1 < max_length:\n"
    assert source.count(old) == 1
    namespace = {}
    exec(compile(source.replace(old, new), be.__file__, "exec"), be.__dict__, namespace)
    be.generate_decoding_sample = namespace["generate_decoding_sample"]


def build_models(torch):
    from deepspec.modeling.dspark.qwen3 import Qwen3DSparkModel
    from deepspec.modeling.dspark.qwen3.config import build_draft_config
    from transformers import Qwen3Config, Qwen3ForCausalLM

    class Args(dict):
        __getattr__ = dict.__getitem__

    config = Qwen3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, initializer_range=0.5,
                         tie_word_embeddings=False, attn_implementation="sdpa")
    args = Args(block_size=BLOCK, num_draft_layers=1, target_layer_ids=[0], mask_token_id=VOCAB - 1, num_anchors=1,
                markov_rank=8, markov_head_type="vanilla", confidence_head_alpha=1.0, confidence_head_with_markov=True)
    torch.manual_seed(0)
    target = Qwen3ForCausalLM(config).eval()
    draft_config = build_draft_config(config, args)
    draft_config._attn_implementation = "sdpa"  # the evaluator's attention
    drafter = Qwen3DSparkModel(draft_config).eval()
    return target, drafter


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--with-fix", action="store_true")
    args = parser.parse_args()
    require_version(deepspec_root())
    import torch
    from deepspec.eval import base_evaluator as be
    from deepspec.eval.dspark.evaluator import Qwen3DSparkEvaluator

    if args.with_fix:
        apply_fix()
    target, drafter = build_models(torch)
    ev = object.__new__(Qwen3DSparkEvaluator)  # its callbacks need only the models and args
    ev.target_model, ev.draft_model, ev.confidence_head_recorder = target, drafter, None
    ev.args = SimpleNamespace(temperature=0.0, confidence_threshold=0.0, max_new_tokens=1)
    torch.manual_seed(0)
    out = be.generate_decoding_sample(
        target_model=target, input_ids=torch.tensor([PROMPT]), max_new_tokens=1,
        max_proposal_tokens=ev.max_proposal_tokens, temperature=0.0, stop_token_ids=None,
        init_context=ev._init_context, propose=ev._propose, update=ev._update, post_verify=ev._post_verify)
    emitted_by_rounds = out.num_output_tokens - 1  # the prefill emits the first token
    print(f"output tokens {out.output_ids[0, out.num_input_tokens:].tolist()} (max_new_tokens 1)")
    print("expected: no speculative round once max_new_tokens tokens are out (verify_count 0)")
    print(f"observed: verify_count {out.verify_count}, acceptance_lengths {out.acceptance_lengths}, "
          f"tokens those rounds emitted {emitted_by_rounds}")
    return 1 if out.verify_count > 0 and emitted_by_rounds == 0 else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except Exception as e:  # an unexpected error is not the finding
        print(f"{FINDING}: unexpected error: {type(e).__name__}: {e}")
        sys.exit(3)

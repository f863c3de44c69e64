"""OPT-001 (SGLang 0.5.23): with SGLANG_DSPARK_EMBED_IN_GRAPH=0, an eager DSpark draft step on a float16 or float32
model raises a dtype error: the model runner casts every staged input embedding to bfloat16.

DraftBlockProposer._run_forward (dspark_draft.py:582-588) embeds the draft block itself when the setting is off
(`embed_module(draft_block_ids)`, in the model's dtype) and hands it to the draft runner as ForwardBatch.input_embeds.
On the eager path (no CUDA graph: --disable-cuda-graph, or a batch past the largest captured size) EagerRunner asks
ModelRunner._extend_forward_kwargs (model_runner.py:1771-1772) for the forward's kwargs, and that casts
`forward_batch.input_embeds.bfloat16()` whatever the model's dtype is. A bfloat16 model does not notice; a float16 or
float32 one (`--dtype float16`, admitted for DSPARK) gets bfloat16 activations into its first linear layer:
`RuntimeError: expected m1 and m2 to have the same dtype, but got: c10::BFloat16 != c10::Half`. The captured graph
path copies the embedding into a buffer of the model's dtype (decode_cuda_graph_runner.py:1592), so only eager steps
fail. With the setting on (the default) the draft embeds inside its own forward and no input_embeds is staged.

This script calls the two pieces of SGLang's own code on that path: the draft's input embedding as the proposer makes
it (the model's embedding, float16 here), then ModelRunner._extend_forward_kwargs on a ForwardBatch holding it, then
the first projection of the draft (a float16 linear layer, as unquant.py:614 calls it).

    python findings/sglang/opt_001_input_embeds_cast_to_bf16.py             # exits 1 on sglang 0.5.23
    python findings/sglang/opt_001_input_embeds_cast_to_bf16.py --with-fix  # in-process fix, exits 0

Imports only the standard library, torch and sglang (plus _cpu_setup.py next to this file).
"""

import argparse
import os
import sys
from types import SimpleNamespace

sys.dont_write_bytecode = True  # no __pycache__ next to the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _cpu_setup  # noqa: E402

FINDING = "OPT-001 (SGLANG_DSPARK_EMBED_IN_GRAPH=0)"
HIDDEN, VOCAB, TOKENS = 16, 32, 4


def apply_fix():
    """Minimal correction: cast a staged input embedding to the model's dtype, not to bfloat16."""
    from sglang.srt.model_executor.model_runner import ModelRunner

    real = ModelRunner._extend_forward_kwargs

    def _extend_forward_kwargs(self, forward_batch, pp_proxy_tensors):
        kwargs = real(self, forward_batch, pp_proxy_tensors)
        if forward_batch.input_embeds is not None:
            kwargs["input_embeds"] = forward_batch.input_embeds.to(self.dtype)
        return kwargs

    ModelRunner._extend_forward_kwargs = _extend_forward_kwargs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--with-fix", action="store_true", help="apply the minimal in-process correction first")
    args = parser.parse_args()
    _cpu_setup.require_version(FINDING)
    _cpu_setup.prepare()
    import torch

    from sglang.srt.model_executor.model_runner import ModelRunner

    if args.with_fix:
        apply_fix()
    dtype = torch.float16  # `--dtype float16`; float32 fails the same way
    torch.manual_seed(0)
    embed = torch.nn.Embedding(VOCAB, HIDDEN).to(dtype)  # the target embedding the draft shares
    qkv = torch.nn.Linear(HIDDEN, 3 * HIDDEN, bias=False).to(dtype)  # the draft's first projection
    draft_block_ids = torch.tensor([[5, 31, 31, 31]])  # anchor, then the mask token
    input_embeds = embed(draft_block_ids).view(-1, HIDDEN)  # dspark_draft.py:587-588
    # What ModelRunner._extend_forward_kwargs reads: the runner's dtype (for the fix), its pp kwargs and kind.
    runner = SimpleNamespace(dtype=dtype, is_generation=True, _pp_kwargs=lambda proxy: {})
    batch = SimpleNamespace(input_embeds=input_embeds, replace_embeds=None, replace_positions=None)
    kwargs = ModelRunner._extend_forward_kwargs(runner, batch, None)
    staged = kwargs["input_embeds"]
    print(f"model dtype {dtype}, draft input embedding {input_embeds.dtype}, staged for the forward {staged.dtype}")
    try:
        torch.nn.functional.linear(staged, qkv.weight)
    except RuntimeError as e:
        print(f"expected: the draft forward runs on {dtype} activations")
        print(f"observed: RuntimeError: {e}")
        return 1
    print("passed: the staged embedding keeps the model's dtype")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except Exception as e:  # noqa: BLE001 - an unexpected error is exit 3, as the folder's README says
        print(f"{FINDING}: unexpected error: {type(e).__name__}: {e}")
        sys.exit(3)

"""Weights-free models built in-process from seeds: a small Qwen3 target and DeepSpec's own DSpark drafter.

The target is transformers' `Qwen3ForCausalLM` from a `Qwen3Config`; the drafter is DeepSpec's `Qwen3DSparkModel`
from DeepSpec's `build_draft_config` (as its trainer builds it), with the target's embedding and LM head copied in
(`initialize_embeddings_and_head`, as its trainer does), then cast as the evaluator loads them. Every weight comes
from `torch.manual_seed(model_seed)`, so a spec names its models. Nothing is downloaded.

Substitutes (docs/engines/deepspec.md): float32 on CPU (the evaluator loads bfloat16 on CUDA; bf16-only paths such
as DeepSpec #31 cannot show), sdpa attention for the drafter (its training default is flex_attention; the evaluator
itself uses sdpa), a wider weight init than the HF default (0.02 gives near-uniform laws, where wrong laws hide),
and the mask token is the last id of a small vocabulary (a real token the target can emit, unlike Qwen's reserved
id).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN = 32, 4, 2, 8, 64
TARGET_LAYERS = 2
INIT_STD = 0.5  # wide enough that the target's laws are far from uniform
MARKOV_RANK = 8
DRAFTERS = ("vanilla", "gated", "rnn", "none")  # the Markov head (none: markov_rank 0)


@dataclass(frozen=True)
class ModelSpec:
    vocab_size: int
    block_size: int  # gamma: the drafter's block
    drafter: str = "vanilla"
    confidence_head: bool = True
    model_seed: int = 0

    def __post_init__(self):
        if not isinstance(self.vocab_size, int) or self.vocab_size < 2:
            raise ValueError(f"vocab_size: the models need at least 2 tokens, got {self.vocab_size!r}")
        if not isinstance(self.block_size, int) or self.block_size < 1:
            raise ValueError(f"block_size: the drafter's block is at least 1, got {self.block_size!r}")
        if self.drafter not in DRAFTERS:
            raise ValueError(f"drafter: DeepSpec's Markov heads here are {DRAFTERS}, got {self.drafter!r}")


class _ModelArgs(dict):
    """DeepSpec's config node shape: `key in args` and `args.key` (build_draft_config reads both)."""

    def __getattr__(self, item):
        try:
            return self[item]
        except KeyError:
            raise AttributeError(item) from None


def build_models(spec: ModelSpec, dtype=torch.float32):
    """(target, drafter), both eval(), on CPU, from `spec.model_seed` alone."""
    from deepspec.modeling.dspark.qwen3 import Qwen3DSparkModel
    from deepspec.modeling.dspark.qwen3.config import build_draft_config
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=spec.vocab_size, hidden_size=HIDDEN, intermediate_size=FFN,
                         num_hidden_layers=TARGET_LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                         head_dim=HEAD_DIM, max_position_embeddings=256, initializer_range=INIT_STD,
                         tie_word_embeddings=False, attn_implementation="sdpa")
    args = _ModelArgs(block_size=spec.block_size, num_draft_layers=1, target_layer_ids=[0],
                      mask_token_id=spec.vocab_size - 1, num_anchors=1,
                      markov_rank=0 if spec.drafter == "none" else MARKOV_RANK,
                      markov_head_type="vanilla" if spec.drafter == "none" else spec.drafter,
                      confidence_head_alpha=1.0 if spec.confidence_head else 0.0,
                      confidence_head_with_markov=spec.confidence_head and spec.drafter != "none")
    torch.manual_seed(spec.model_seed)
    target = Qwen3ForCausalLM(config)
    draft_config = build_draft_config(config, args)
    draft_config._attn_implementation = "sdpa"  # the evaluator's attention (training uses flex_attention)
    drafter = Qwen3DSparkModel(draft_config)
    drafter.initialize_embeddings_and_head(embed_tokens=target.model.embed_tokens, lm_head=target.lm_head)
    return target.to(dtype).eval(), drafter.to(dtype).eval()

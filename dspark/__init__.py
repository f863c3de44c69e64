"""A compact reference DSpark engine.

It models the parts of SGLang 0.5.23's DSpark speculative decoding that meet at
feature boundaries (PD handoff, the overlap FutureMap relay, DP-attention
metadata, verify/accept, the ragged-verify planner) on CPU tensors and
weights-free toy models, under SGLang's names so it reads like the system it
models. It never imports `contracts`.
"""

__version__ = "0.1.0"

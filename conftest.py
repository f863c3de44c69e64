import os

import torch

# Triton decides interpreted vs compiled when a kernel is decorated, so the
# interpreter must be chosen before anything imports dspark.verify.triton_kernels.
# Without a GPU, the Triton kernels then run (slowly, exactly) on CPU tensors.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The contracts' pytest plugin: markers, Hypothesis profiles, --engine, the contract table.
pytest_plugins = ["contracts.plugin", "pytester"]

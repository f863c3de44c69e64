import os

# Contract cases are tiny tensors: one intra-op thread is faster and steadier than a pool on a 2-core
# machine (as `dspark-contracts check` runs); set before torch starts its pool.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

# Triton decides interpreted vs compiled when a kernel is decorated, so the
# interpreter must be chosen before anything imports dspark.verify.triton_kernels.
# Without a GPU, the Triton kernels then run (slowly, exactly) on CPU tensors.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The contracts' pytest plugin: markers, Hypothesis profiles, --engine, the contract table.
pytest_plugins = ["contracts.plugin", "pytester"]


def pytest_collection_finish(session):
    # Every test module and what it imports is loaded now: keep the collector's full passes off them.
    from contracts import heap

    heap.settle()

"""What one SGLang module sees as `torch` when the pack hands it a device surface the CPU lacks.

SGLang asks for its device's module (`torch.get_device_module(device)`) and for pinned host memory
(`torch.empty(..., pin_memory=True)`); on a CPU-only torch the first is `torch.cpu`, whose `Event` takes no timing
flag and whose `Stream` takes no device, and the second raises. `torch_view(device_module)` is torch with those two
answers replaced, to be patched in as one module's `torch` global (`patched(module, "torch", view)`), so no other
module sees it. Users: the relay ring's CUDA branch (relay_cuda_path, relay_ring_model) and the observers' GPU timing
(`host_timed_observers`).
"""

from __future__ import annotations

import contextlib
import time
import types
from typing import Iterator, Optional

import torch

from contracts.patching import patched


def unpinned(fn):
    """`fn` (an allocator) with `pin_memory=True` dropped: no pinned allocator without an accelerator."""

    def alloc(*a, pin_memory=False, **k):
        return fn(*a, **k)

    return alloc


def torch_view(device_module) -> types.ModuleType:
    """torch, but `get_device_module()` is `device_module` and `empty(pin_memory=True)` a plain host tensor."""
    view = types.ModuleType("torch")
    view.__dict__.update(torch.__dict__)
    view.get_device_module = lambda device=None: device_module
    view.empty = unpinned(torch.empty)
    return view


class HostTimedEvent:
    """`torch.cuda.Event(enable_timing=True)` on the host clock: `record` stamps `time.perf_counter()`, `elapsed_time`
    is milliseconds between two stamps. Work on the CPU is done when the host reaches `record`, so the stamp is where a
    GPU event would complete. CUDA's own refusals are kept: `elapsed_time` between events that were not both created
    with `enable_timing` or not both recorded raises (cudaErrorInvalidResourceHandle / cudaErrorNotReady there)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self.stamp: Optional[float] = None

    def record(self, stream=None) -> None:
        self.stamp = time.perf_counter()

    def query(self) -> bool:
        return self.stamp is not None

    def synchronize(self) -> None:
        pass  # a recorded host stamp is complete; an unrecorded CUDA event's synchronize returns at once too

    def wait(self, stream=None) -> None:
        pass

    def elapsed_time(self, end: "HostTimedEvent") -> float:
        if not (self.enable_timing and end.enable_timing):
            raise RuntimeError("elapsed_time: both events must be created with enable_timing=True")
        if self.stamp is None or end.stamp is None:
            raise RuntimeError("elapsed_time: both events must be recorded")
        return (end.stamp - self.stamp) * 1000.0


class HostTimedDevice:
    """torch.cpu with CUDA's timing surface: `Event(enable_timing=...)` is a `HostTimedEvent` and `Stream(device=...)`
    a `torch.cpu.Stream`; everything else is torch.cpu's."""

    @staticmethod
    def Event(*a, **k):  # noqa: N802 (torch's spelling)
        return HostTimedEvent(*a, **k)

    @staticmethod
    def Stream(device=None, priority: int = 0):  # noqa: N802
        return torch.cpu.Stream()

    def __getattr__(self, name):
        return getattr(torch.cpu, name)


@contextlib.contextmanager
def host_timed_observers() -> Iterator[None]:
    """SGLang's DSpark observers (dspark_observability) with GPU timing on the host clock, and the `reqs` component's
    device-to-host staging (kv_canary's FutureTensors) with plain host tensors for pinned ones, in those two modules'
    namespaces only.

    What it can hide: the staging copy completes when issued (torch.cpu's streams run in order), so a read of the
    staged step records before their copy completes cannot show; the times are host intervals, so a segment whose
    events are recorded on a stream other than the work's measures nothing wrong here."""
    from sglang.srt.kv_canary.runner import future_tensor
    from sglang.srt.speculative.dspark_components import dspark_observability

    with patched(dspark_observability, "torch", torch_view(HostTimedDevice())), \
            patched(future_tensor, "torch", torch_view(torch.cpu)):
        yield

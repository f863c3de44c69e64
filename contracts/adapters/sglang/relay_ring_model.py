"""overlap_utils' CUDA branch on the repo's stream model (`contracts.streams.StreamModel`), so that the ring's
device-to-host copy is really pending until the model's schedule completes it.

Inside `ring_branch_on(model)`, and only in overlap_utils' own namespace, as in `relay_cuda_path.cuda_ring_branch`:
`_is_cuda` is True and pinned allocations are plain host tensors. The device module overlap_utils asks for is the
model's surface: `Stream()` (FutureMap's `fwd_prepare_d2h_stream`), `Event()` (`publish_ready`, the ring slots'
`copy_done`), `stream(s)`. A non-blocking `Tensor.copy_` issued while a side stream is current (the ring copy
`conf_ring[slot].copy_(confidence_buf, non_blocking=True)`) is enqueued on that stream and runs when the model
completes it; events are recorded, waited on and queried as the model orders them.

What the adapter declares to the race detector, since SGLang's host code does not say what it touches:
* `ConfidenceRelay.scatter` is a forward-stream kernel writing `confidence_buf` rows (its effect is applied at once,
  after the declaration: a pending copy that is not ordered before it is reported, and then reads the new values);
* `ConfidenceRelay.resolve`, when it returns ring values, is a host read of the slot it read.
The ring's generation copy (`gen_ring[slot].copy_(pool.req_generation)`) is a synchronous host copy in SGLang and
stays one. Not run here: the scheduler's WAR barrier and the seq-lens D2H read, which on a GPU also order the ring's
stream against the forward stream.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch.overrides import TorchFunctionMode

from contracts.adapters.sglang.device_view import torch_view
from contracts.adapters.sglang.runtime import runtime
from contracts.patching import patched


def _key(t: torch.Tensor) -> tuple:
    return t.untyped_storage().data_ptr(), t.storage_offset()


class _ModelDevice:
    """The device module (`torch.get_device_module(device)`) overlap_utils sees: the model's surface."""

    def __init__(self, model):
        self.model = model

    def Stream(self, *a, **k):  # noqa: N802 (torch's spelling)
        return self.model.Stream("fwd_prepare_d2h_stream")

    def Event(self, *a, **k):  # noqa: N802
        return self.model.Event()

    def stream(self, s=None):
        return contextlib.nullcontext() if s is None else self.model.stream(s)

    def current_stream(self, *a):
        return self.model.current_stream()


class _PendingCopies(TorchFunctionMode):
    """Non-blocking copies issued on a side stream are enqueued there, not run at once."""

    def __init__(self, model, names: dict):
        super().__init__()
        self.model, self.names = model, names

    def _mem(self, t):
        return self.model.mem(self.names.get(_key(t), f"host tensor {_key(t)[0]:#x}+{_key(t)[1]}"))

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.copy_ and kwargs.get("non_blocking") \
                and self.model.current_stream() is not self.model.default_stream:
            dst, src = args[0], args[1]
            dm, sm = self._mem(dst), self._mem(src)
            self.model.copy_(f"{dm} <- {sm}", dm, sm, lambda: dst.copy_(src), non_blocking=True)
            return dst
        return func(*args, **kwargs)


@contextlib.contextmanager
def ring_branch_on(model) -> Iterator[None]:
    """overlap_utils takes its CUDA branch on this CPU, its streams, events and ring copy on `model`."""
    runtime()
    from sglang.srt.managers import overlap_utils as ou

    names: dict = {}
    device = _ModelDevice(model)
    view = torch_view(device)
    real_init, real_scatter, real_resolve = (ou.ConfidenceRelay._lazy_init, ou.ConfidenceRelay.scatter,
                                             ou.ConfidenceRelay.resolve)

    def lazy_init(self, confidence):
        real_init(self, confidence)
        names[_key(self.confidence_buf)] = "confidence_buf"
        for k in range(self.conf_ring.shape[0]):
            names[_key(self.conf_ring[k])] = f"conf_ring[{k}]"

    def scatter(self, indices, confidence):
        rows = indices.to("cpu", torch.int64).tolist()
        model.launch("scatter into confidence_buf (forward stream)", None,
                     writes=(model.mem("confidence_buf", rows),))
        real_scatter(self, indices, confidence)

    def resolve(self, batch, *, stream, publish_ready):
        out = real_resolve(self, batch, stream=stream, publish_ready=publish_ready)
        if out is not None and stream is not None and publish_ready is not None:
            slot = (self.ring_pos - ou.CONFIDENCE_RELAY_RING_LAG) % ou.CONFIDENCE_RELAY_RING_DEPTH
            model.host_read(model.mem(f"conf_ring[{slot}]"), "resolve reads the ring slot")
        return out

    with patched(ou, "_is_cuda", True), patched(ou, "torch", view), \
            patched(ou.ConfidenceRelay, "_lazy_init", lazy_init), patched(ou.ConfidenceRelay, "scatter", scatter), \
            patched(ou.ConfidenceRelay, "resolve", resolve), _PendingCopies(model, names):
        yield

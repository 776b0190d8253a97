"""What a training step or an evaluation batch asks of the device, counted on any device (the CPU included): aten ops,
the ops that make the host wait for a GPU, and casts of the frozen weights (`bench/gpu_checks.py --sections loop`,
`tests/continual/test_loop.py`). Counts are per call; per step, the difference of two calls with 2N and N steps.

A host sync is an op whose result the host must read: on a GPU it waits for all the work queued before it. The
profiler names them `SYNC_OPS` (one `.item()` or `bool(tensor)` is up to three events); `HostSyncs` counts each read
once, where it reaches a kernel, at a fraction of the profiler's cost. Both tell apart the model's forward (its
library's), an optimizer's step (a non-fused AdamW reads its host-held step counters: no device sync) and the rest
(the loop's own code)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from functools import partial

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils._python_dispatch import TorchDispatchMode

SYNC_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero")
FORWARD = "model.forward"
OPTIMIZER = "Optimizer.step#"
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")


@dataclass(frozen=True)
class OpCounts:
    """Counts over one profiled call (or their difference per step: `per_step`)."""

    aten_ops: float  # every aten op (nested ones too); on a GPU most of them launch a kernel
    syncs: float  # SYNC_OPS events, except the optimizer's reads of its host-held counters
    syncs_outside_forward: float  # of those, the ones outside the model's forward (the loop's own code)
    optimizer_counter_reads: float  # SYNC_OPS inside the optimizer's step
    casts: float  # aten::_to_copy: dtype (and device) conversions
    device_to_host: float  # device → host copies (CUDA memcpy events; 0 on the CPU)
    launches: float  # kernel launches (CUDA runtime/driver calls; 0 on the CPU)
    device_busy_s: float  # self device time of the kernels (0 on the CPU)
    wall_s: float

    def per_step(self, fewer: OpCounts, steps: int) -> OpCounts:
        """(self − fewer) / steps: the marginal cost of one step, from a call with `steps` more steps than `fewer`."""
        return OpCounts(*((getattr(self, f.name) - getattr(fewer, f.name)) / steps for f in fields(self)))


def _inside(event, prefix: str) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(prefix):
            return True
        parent = parent.cpu_parent
    return False


def count_ops(fn: Callable[[], object], device: torch.device | str = "cpu") -> OpCounts:
    """Run `fn()` once under the profiler (CPU, and CUDA on a CUDA device) and count (`OpCounts`)."""
    cuda = torch.device(device).type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    if cuda:
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize(device)
    wall = time.perf_counter() - start
    aten = syncs = outside = optimizer = casts = to_host = launches = 0
    busy_us = 0.0
    for event in prof.events():
        name = event.name
        aten += name.startswith("aten::")
        casts += name == "aten::_to_copy"
        launches += name in LAUNCHES
        to_host += "DtoH" in name or "Device -> Host" in name
        if cuda and event.device_type == torch.autograd.DeviceType.CUDA:
            busy_us += event.self_device_time_total
        if name in SYNC_OPS:
            if _inside(event, OPTIMIZER):
                optimizer += 1
            else:
                syncs += 1
                outside += not _inside(event, FORWARD)
    return OpCounts(aten, syncs, outside, optimizer, casts, to_host, launches, busy_us / 1e6, wall)


@contextmanager
def forward_marked(model: torch.nn.Module) -> Iterator[None]:
    """Inside: every call of `model`'s forward runs in a profiler range named `FORWARD` (an instance attribute that
    wraps the class's forward, removed on leaving)."""
    original = model.forward

    def forward(*args, **kwargs):
        with record_function(FORWARD):
            return original(*args, **kwargs)

    model.forward = forward
    try:
        yield
    finally:
        del model.forward


class WeightCasts(TorchDispatchMode):
    """Counts the copies made from any of `weights` (by storage) into another tensor: `_to_copy` (a dtype cast, as
    autocast makes of an fp32 weight read by a bf16 matmul) and `copy_` from it."""

    def __init__(self, weights: Iterable[torch.Tensor]) -> None:
        super().__init__()
        self.storages = {weight.untyped_storage().data_ptr() for weight in weights}
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = func.overloadpacket
        source = args[0] if packet is torch.ops.aten._to_copy else args[1] if packet is torch.ops.aten.copy_ else None
        if isinstance(source, torch.Tensor) and source.untyped_storage().data_ptr() in self.storages:
            self.count += 1
        return func(*args, **(kwargs or {}))


class HostSyncs(TorchDispatchMode):
    """Inside (`with HostSyncs(model) as syncs:`): counts the host reads of tensors (`READS`) in `model`'s forward
    (`forward`), in any optimizer's step (`optimizer`) and elsewhere (`loop`)."""

    READS = (torch.ops.aten._local_scalar_dense, torch.ops.aten.nonzero)

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        self.forward = self.optimizer = self.loop = 0
        self._where: list[str] = []

    def _enter(self, place: str, *_) -> None:
        self._where.append(place)

    def _leave(self, *_) -> None:
        self._where.pop()

    def __enter__(self):
        self._hooks = [self.model.register_forward_pre_hook(partial(self._enter, "forward")),
                       self.model.register_forward_hook(self._leave),
                       register_optimizer_step_pre_hook(partial(self._enter, "optimizer")),
                       register_optimizer_step_post_hook(self._leave)]
        return super().__enter__()

    def __exit__(self, *exc):
        for hook in self._hooks:
            hook.remove()
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in self.READS:
            place = self._where[-1] if self._where else "loop"
            setattr(self, place, getattr(self, place) + 1)
        return func(*args, **(kwargs or {}))

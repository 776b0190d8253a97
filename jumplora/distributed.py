"""Data parallelism for the one continual loop: a `Shard` says which worker this process is and sums over workers.
Every worker runs the same loop with its own shard: its pieces of every global batch (`training.stage_steps`), its
slice of every task's examples in an evaluation (`bounds`), and `sum_gradients` before clipping and the step
(DistributedDataParallel does not fit an adapter made afresh per task and merged away). The launcher (Ray Train,
torchrun, or a test's `init_process_group`) sets the process group up."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # a Shard is handed to the workers: the collectives import torch where they run
    import torch

T = TypeVar("T")


@dataclass(frozen=True)
class Shard:
    """This process's place in the worker group; collectives are skipped for a single process."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    def bounds(self, n: int) -> tuple[int, int]:
        """A contiguous slice of range(n); the ranks' slices partition it (no padding, unlike a DistributedSampler)."""
        return n * self.rank // self.world, n * (self.rank + 1) // self.world

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` over the workers, in place."""
        if self.world > 1:
            import torch.distributed as dist

            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def sum_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Sum the gradients over the workers (one flattened all-reduce). Which parameters have a gradient is the
        same on every worker (the loop gives every trainable parameter one, zero where none reached it)."""
        self.sum_all_([p.grad for p in params if p.grad is not None])

    def sum_all_(self, tensors: list[torch.Tensor]) -> None:
        """Sum each of `tensors` (one dtype) over the workers, in place, with one flattened all-reduce."""
        if self.world == 1 or not tensors:
            return
        import torch

        flat = self.sum_(torch.cat([t.reshape(-1) for t in tensors]))
        for tensor, summed in zip(tensors, flat.split([t.numel() for t in tensors]), strict=True):
            tensor.copy_(summed.view_as(tensor))

    def in_turn(self, build: Callable[[], T]) -> T:
        """`build()` on the first worker of each node, then on the others (which then find the node's cache)."""
        first = self.local_rank == 0
        if self.world > 1:
            import torch.distributed as dist
        if self.world > 1 and not first:
            dist.barrier()
        result = build()
        if self.world > 1 and first:
            dist.barrier()
        return result


SINGLE = Shard()

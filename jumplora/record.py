"""One finished task of a continual run: the single record that the loop, the checkpoints, the run directory and
MLflow all read (the loop makes it; `results.json` and a checkpoint's `progress.json` hold it as JSON)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from jumplora.results import RunResults

if TYPE_CHECKING:
    import torch


@dataclass
class TaskRecord:
    """Task `task` of the order, trained with λ = `lam`, merged, then evaluated on the tasks seen so far."""

    task: str
    lam: float
    ce: list[float]  # per optimizer step: mean CE over the global batch's label tokens
    penalty: list[float]  # per optimizer step: λ·P
    thresholds: dict[str, float]  # τ per group at the end of the task (empty for plain LoRA)
    sparsity: dict  # of ΔW_final: {"overall": f, "per_layer": {block: f}, "per_module": {module: f}}
    update: dict[str, torch.Tensor] | None = None  # β·ΔW_final per module, on the CPU; None when read from JSON
    test: list[float] = field(default_factory=list)  # a[t][j] for j ≤ t, test split
    dev: list[float] = field(default_factory=list)  # the same on dev
    # the examples' right/wrong flags of each cell of `test` / `dev`, `jumplora.flags.pack`ed, in the same order
    test_flags: list[str] = field(default_factory=list)
    dev_flags: list[str] = field(default_factory=list)
    # wall seconds of the task: training, merge, what the method remembers, evaluation (a resumed run sums them)
    seconds: float = 0.0

    @property
    def steps(self) -> int:
        """Optimizer steps of the task's training: one CE value was recorded per step."""
        return len(self.ce)

    @staticmethod
    def sparsity_of(update: dict[str, torch.Tensor]) -> dict:
        from jumplora import analysis  # torch: a record is read without it

        return analysis.sparsity(update)

    def to_json(self) -> dict:
        """Everything but the update tensors (those go to safetensors files)."""
        data = asdict(self)
        del data["update"]
        return data

    @classmethod
    def from_json(cls, data: dict, update: dict[str, torch.Tensor] | None = None) -> TaskRecord:
        return cls(**data, update=update)

    @classmethod
    def from_results(cls, results: RunResults, t: int) -> TaskRecord:
        """Training t of a `results.json` payload (see `jumplora.continual.summarise`): task t of the order, or
        MTL's one training (`task` "mtl", its row covering every task)."""
        task = "mtl" if results.joint else results.tasks[t]
        seconds = (results.cost or {}).get("task_seconds")  # absent from runs written before it was recorded
        return cls(task=task, lam=float(results.lambdas[t]),
                   ce=results.loss_curves["ce"][t], penalty=results.loss_curves["penalty"][t],
                   thresholds=results.thresholds[t], sparsity=results.sparsity[t],
                   test=[v for v in results.accuracy_matrix[t] if v is not None],
                   dev=[v for v in results.dev_accuracy_matrix[t] if v is not None],
                   test_flags=list(results.test_flags[t]) if results.test_flags else [],
                   dev_flags=list(results.dev_flags[t]) if results.dev_flags else [],
                   seconds=seconds[t] if seconds else 0.0)


def training_names(results: RunResults) -> list[str]:
    """A name per training, i.e. per row of the accuracy matrices: the order's tasks; for a joint method (MTL: one
    training on the union of the order's tasks, one row) the method's name."""
    return [results.method] if results.joint else list(results.tasks)

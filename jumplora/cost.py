"""What a run cost, measured (`ray_jobs/costs.py` estimates a λ grid's beforehand): its trainings, their optimizer
steps, their wall time and device-hours, for `results.json`, MLflow and the reports (what is timed, what is left out
and how devices are counted: docs/DECISIONS.md, "Cost beside accuracy")."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jumplora.record import TaskRecord


@dataclass
class Cost:
    """Trainings, their optimizer steps and wall seconds (each with the evaluation after it)."""

    trainings: int = 0
    optimizer_steps: int = 0
    seconds: float = 0.0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.trainings + other.trainings, self.optimizer_steps + other.optimizer_steps,
                    self.seconds + other.seconds)

    def add(self, record: TaskRecord) -> None:
        """Count one more training (in place)."""
        self.trainings, self.optimizer_steps = self.trainings + 1, self.optimizer_steps + record.steps
        self.seconds += record.seconds


def devices(runtime: dict | None) -> tuple[int, str]:
    """How many devices a run's training held, and which: (world size, "GPU") on CUDA, (world size × CPU threads,
    "CPU") elsewhere; (1, "CPU") when the run recorded no runtime."""
    runtime = runtime or {}
    world = int(runtime.get("world_size", 1))
    if runtime.get("device_type") == "cuda":
        return world, "GPU"
    return world * int(runtime.get("threads", 1)), "CPU"


def summary(records: list[TaskRecord], runtime: dict | None, single_task: Cost | None = None) -> dict:
    """The `cost` of results.json: totals over the run's trainings and the single-task runs it trained (a0 taken from
    the cache cost this run nothing), device-hours, and each training's seconds (in order, for the MLflow child
    runs)."""
    extra = single_task or Cost()
    total = Cost(len(records), sum(record.steps for record in records),
                 sum(record.seconds for record in records)) + extra
    count, unit = devices(runtime)
    return {"wall_seconds": total.seconds, "device_hours": count * total.seconds / 3600, "device_unit": unit,
            "devices": count, "trainings": total.trainings, "optimizer_steps": total.optimizer_steps,
            "task_seconds": [record.seconds for record in records], "single_task": asdict(extra)}


def metrics(cost: dict | None) -> dict[str, float]:
    """The MLflow metrics of a results.json `cost` (none for a run written before it was recorded)."""
    if not cost:
        return {}
    return {"cost/wall_hours": cost["wall_seconds"] / 3600, "cost/device_hours": cost["device_hours"],
            "cost/trainings": cost["trainings"], "cost/optimizer_steps": cost["optimizer_steps"]}

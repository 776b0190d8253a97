"""A run directory, written by `write_run` alone for every entry point: `updates.safetensors` (accumulated merged
updates, sparse ones compact), `summary.txt`, `accuracy_matrix.csv`, the plots, and `results.json`, written last and
atomically, so its presence means the run completed."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING

from jumplora import tables, uncertainty
from jumplora.errors import writing
from jumplora.ownership import write_text, written
from jumplora.record import training_names
from jumplora.results import RunResults

if TYPE_CHECKING:  # a reader of run directories loads no torch: the tensors' functions import it
    import torch

logger = logging.getLogger(__name__)

RESULTS = "results.json"
UPDATES = "updates.safetensors"
SUMMARY = "summary.txt"
ACCURACY_CSV = "accuracy_matrix.csv"
# the two a0 rows of results.json, as the summary labels them (SPEC §4)
A0_ROWS = {"single_task_accuracy": "a0 own", "single_task_accuracy_shared": "a0 LoRA"}
SPARSE_BELOW_DENSITY = 0.5  # below this fraction of non-zeros, (int32 index, value) pairs are smaller than dense


def accumulate(task_updates: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Σ over tasks of β·ΔW_final per module: what the run added to each adapted weight."""
    total: dict[str, torch.Tensor] = {}
    for updates in task_updates:
        for name, update in updates.items():
            total[name] = total[name] + update if name in total else update.clone()
    return total


def save_updates(path: Path, updates: dict[str, torch.Tensor]) -> None:
    """Dense modules as `<name>`; sparse ones as `<name>.indices` (flat, int64) and `<name>.values`. A −0.0 is kept
    as a value: restored as +0.0 it would make a resumed run's sums differ in their bytes from an uninterrupted
    run's (−0.0 + −0.0 is −0.0, +0.0 + −0.0 is +0.0)."""
    import torch
    from safetensors.torch import save_file

    tensors: dict[str, torch.Tensor] = {}
    shapes: dict[str, list[int]] = {}
    for name, update in updates.items():
        flat = update.detach().cpu().contiguous().reshape(-1)
        nonzero = torch.nonzero((flat != 0) | torch.signbit(flat)).reshape(-1)
        if nonzero.numel() < SPARSE_BELOW_DENSITY * flat.numel():
            tensors[f"{name}.indices"] = nonzero
            tensors[f"{name}.values"] = flat[nonzero].contiguous()
            shapes[name] = list(update.shape)
        else:
            tensors[name] = update.detach().cpu().contiguous()
    with written(path) as tmp:
        save_file(tensors, str(tmp), metadata={"sparse_shapes": json.dumps(shapes)})


def load_updates(path: Path) -> dict[str, torch.Tensor]:
    """Inverse of `save_updates`: every module's update as a dense tensor."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as handle:
        shapes = json.loads((handle.metadata() or {}).get("sparse_shapes", "{}"))
    tensors = load_file(str(path))
    updates = {name: t for name, t in tensors.items() if not name.endswith((".indices", ".values"))}
    for name, shape in shapes.items():
        dense = torch.zeros(math.prod(shape), dtype=tensors[f"{name}.values"].dtype)
        dense[tensors[f"{name}.indices"]] = tensors[f"{name}.values"]
        updates[name] = dense.reshape(shape)
    return updates


def _pct(value: float | None) -> str:
    return "  -  " if value is None else f"{100 * value:5.1f}"


# a matrix column is as wide as its task's name (at least a cell's five characters): a name longer than this is cut,
# its last character `…`, so that a plugin's long task names do not push a 15-task row off a terminal
MAX_COLUMN = 12


def matrix_row(label: str, width: int, values, heads: list[str]) -> str:
    """A row of the matrix: its label, then each value (`_pct`) right-aligned under its column's header."""
    cells = (f"{_pct(value):>{max(5, len(head))}}" for value, head in zip(values, heads, strict=True))
    return f"{label:<{width}}" + " ".join(cells)


def format_summary(results: RunResults) -> str:
    """The accuracy matrix (percent, rows: after task i) with each cell's 95 % Wilson interval, and OA, the learning
    accuracy (LA: plasticity beside BWT's forgetting; computed from the matrix for a run written before it was
    recorded), BWT and FWT with their 95 % bootstrap intervals (`uncertainty`; a run written before flags were kept:
    one note, no intervals), as printed at the end of a run. MTL (one training on all tasks): one row, and LA / BWT /
    FWT `–` (results.json: null)."""
    intervals = uncertainty.intervals_of(results)
    tasks, rows = results.tasks, training_names(results)
    joint = rows != list(tasks)  # MTL
    width = max(len(t) for t in [*tasks, *rows]) + 2
    heads = [t if len(t) <= MAX_COLUMN else t[:MAX_COLUMN - 1] + "…" for t in tasks]  # cut names end in `…`
    lines = [f"order {results.order} · {results.method} · seed {results.seed}", "",
             f"test accuracy (%) after {'the one training (row)' if joint else 'each task (rows)'} on each task "
             "(columns):",
             " " * width + " ".join(f"{head:>5}" for head in heads)]
    shown = [*zip(rows, results.accuracy_matrix, strict=True), ("majority", results.majority_baseline),
             *((label, getattr(results, key)) for key, label in A0_ROWS.items())]
    lines += [matrix_row(label, width, row, heads) for label, row in shown if row]  # none: not recorded (older runs)
    if intervals is not None:
        lines += ["", "95 % Wilson interval of each test cell (%):"]
        lines += [f"{task:<{width}}" + " ".join("-" if c is None else c.text(100) for c in row)
                  for task, row in zip(rows, intervals.cells["accuracy_matrix"], strict=True)]
    metric = {} if intervals is None else intervals.metrics

    def ci(name: str) -> str:  # the metric's interval after its value
        return f" {metric[name].text()}" if name in metric else ""

    if results.bwt is None:  # MTL: no BWT, and no FWT (--single-task-baselines is refused for it)
        fwt = f"{tables.NO_VALUE} (MTL trains once on all the tasks: no BWT or FWT)"
    else:
        fwt = "n/a (run with --single-task-baselines)" if results.fwt is None else f"{results.fwt:.2f}{ci('fwt')}"
    learned = results.learning_accuracy()
    la = f"{tables.NO_VALUE} (MTL)" if learned is None else \
        f"{learned:.2f}{ci('la')} (learning accuracy: each task's accuracy right after it was learned, the diagonal)"
    lines += ["", f"OA  {results.oa:.2f}{ci('oa')}", f"LA  {la}", f"BWT {tables.number_text(results.bwt)}{ci('bwt')}",
              f"FWT {fwt}"]
    if results.fwt_last_row is not None:  # absent from runs written before it was recorded
        lines.append(f"FWT last row {results.fwt_last_row:.2f}{ci('fwt_last_row')} (the authors' script, as the "
                     "paper's FWT column)")
    lines.append(uncertainty.NO_FLAGS if intervals is None else uncertainty.NOTE)
    if results.single_task_accuracy:
        lines.append("a0: FWT against 'a0 own' (this method's adapter on each task alone), FWT last row against "
                     "'a0 LoRA' (plain LoRA, shared by every method)")
    lines += unlabelled_lines(results)
    if results.cost:
        lines.append(cost_line(results.cost))
    sparsity = [s["overall"] for s in results.sparsity]
    lines.append(f"sparsity of ΔW_final per {'training' if joint else 'task'} (%): "
                 + " ".join(f"{100 * s:.1f}" for s in sparsity))
    return "\n".join(lines) + "\n"


def unlabelled_lines(results: RunResults) -> list[str]:
    """One line per task whose test file holds rows labelled outside the options (MNLI's "-"), with how they were
    scored (SPEC §4); none for a run written before they were counted."""
    wrong = (results.unlabelled_test or {}).get("scoring") == "wrong"
    return [f"{task}: {rows} test rows labelled outside the options, "
            + (f"scored as wrong (--authors-compat): accuracy over all {labelled + rows} rows" if wrong
               else f"dropped: accuracy over the {labelled} labelled rows")
            for task, (rows, labelled) in results.unlabelled_rows().items()]


def cost_line(cost: dict) -> str:
    """The run's cost in one line (`jumplora.cost.summary`)."""
    a0 = cost["single_task"]["trainings"]
    return (f"cost: {cost['trainings']} trainings{f' ({a0} of them single-task a0)' if a0 else ''}, "
            f"{cost['optimizer_steps']} optimizer steps, {cost['wall_seconds'] / 3600:.3f} h wall, "
            f"{cost['device_hours']:.3f} {cost['device_unit']}-hours")


def accuracy_csv(results: RunResults) -> str:
    """Test and dev accuracy matrices as CSV (fractions; a row per split and task trained, a column per task; MTL: one
    row per split, `after_task` = mtl)."""
    tasks = results.tasks
    lines = [",".join(["split", "after_task", *tasks])]
    for split, key in (("test", "accuracy_matrix"), ("dev", "dev_accuracy_matrix")):
        for task, row in zip(training_names(results), getattr(results, key), strict=True):
            lines.append(",".join([split, task, *("" if v is None else repr(float(v)) for v in row)]))
    return "\n".join(lines) + "\n"


def write_run(out_dir: Path, results: RunResults, updates: list[dict[str, torch.Tensor]]) -> None:
    """The whole run directory, for every entry point, from the results payload and each task's β·ΔW_final per
    module: the summed updates, the summary, the accuracy CSV, the plots (none, with one warning, without
    matplotlib), then `results.json`. Each file is written aside and renamed (`ownership.written`: recorded in the
    record of the `Target` being written), so a failed write (a full disk: a `WriteError`) leaves no partial file
    and no `results.json`: nothing that looks like a finished run."""
    with writing(out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
    save_updates(out_dir / UPDATES, accumulate(updates))
    write_text(out_dir / SUMMARY, format_summary(results))
    write_text(out_dir / ACCURACY_CSV, accuracy_csv(results))
    try:
        from jumplora import plots
    except ImportError as error:  # matplotlib is in the `tracking` extra
        logger.warning("no plots (%s): install the tracking extra", error)
    else:
        plots.run_plots(results, out_dir)
    write_text(out_dir / RESULTS, json.dumps(results.to_json(), indent=1))  # last: marks the run complete

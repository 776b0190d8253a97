"""`jumplora eval`: a merged model's test accuracy on the tasks its run trained, scored as its run scored them
(`jumplora.cli` builds its parser and calls it)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from jumplora import flags, options, tables, tracking, uncertainty
from jumplora.data import location
from jumplora.errors import JumpLoRAError
from jumplora.results import Needs

# what decides a run's test scores besides its model: how it read and encoded its data and how it scored them; eval
# takes them from the run (its results.json), its options (`jumplora eval --help`) override some
SCORED_AS = ("order", "data_dir", "seed", "max_train_per_task", "max_eval_per_task", "strict", "max_source_tokens",
             "max_target_tokens", "eval_batch_size", "eval_mode", "precision", "authors_compat")
# what eval reads of the run: its tasks, last test row and config; of the config, at least the data, seed and cap that
# chose the test examples it scored (every run records them: without them eval would score others, saying nothing)
SCORED = Needs("`jumplora eval` (to score the model as its run scored it)", ("tasks", "config", "accuracy_matrix"),
               ("data_dir", "seed", "max_eval_per_task"))


def eval_command(args) -> int:
    """The model's test accuracy as its run scored it (`eval_plan`), beside the run's last test row, so that a run's
    own model shows the numbers the run printed; each number with its 95 % interval, as the run's summary prints it."""
    if {"order", "data_dir"} <= options.given(args):  # an unknown order of the data given, before anything loads
        from jumplora.data.orders import order_tasks  # (without --data-dir: the run's data, read with the run)

        order_tasks(location.resolve_data_dir(args.data_dir, synthetic_default=True), args.order)
    run = tracking.recorded_run(args.model_dir, args.tracking_uri, SCORED)
    config, tasks = eval_plan(args, run)
    with tracking.model_folder(args.model_dir, args.tracking_uri) as model_dir:
        found = score_tasks(config, tasks, model_dir, progress=not args.quiet)
    ran = run_column(run) if run is not None else None
    scored = Column(dict(zip(tasks, found.accuracies, strict=True)),
                    {task: flags.unpack(cell) for task, cell in zip(tasks, found.flags, strict=True)},
                    {} if ran is None else ran.keys)
    columns = [scored] if ran is None else [scored, ran]
    print(f"{'task':<10} " + " ".join(f"{name:>6} {'95 % interval':<{INTERVAL}}"
                                      for name in ("eval", "run")[:len(columns)]).rstrip())
    for task in tasks:
        print(f"{task:<10} " + " ".join(column.cell(task) for column in columns).rstrip())
    print(f"{'mean':<10} " + " ".join(column.mean(tasks) for column in columns).rstrip())
    print(uncertainty.ROW_NOTE if ran is None or ran.cells is not None else
          f"{uncertainty.ROW_NOTE}; the run: {uncertainty.NO_FLAGS}")
    if args.json:
        print(json.dumps(scored.accuracies))
    return 0


INTERVAL = len("[100.0, 100.0]")  # the widest interval a column prints
NO_SCORE = f"{tables.NO_VALUE:>6} {'':<{INTERVAL}}"  # a cell without a score


@dataclass(frozen=True)
class Column:
    """A column of eval's table: each task's test accuracy (a fraction) and its flags (None: a run that kept none),
    keyed as the run keys them (`uncertainty.task_key`; else by the task's name), so that the model's column and its
    run's draw the same examples for their mean's interval."""

    accuracies: dict[str, float]
    cells: dict[str, np.ndarray] | None
    keys: dict[str, tuple]

    def cell(self, task: str) -> str:
        """A task's accuracy (%) and its Wilson interval; `–` for a task the column has no score for."""
        if task not in self.accuracies:
            return NO_SCORE
        cell = None if self.cells is None else self.cells[task]
        interval = "" if cell is None or not cell.size else uncertainty.cell_interval(cell).text(100)
        return f"{100 * self.accuracies[task]:6.2f} {interval:<{INTERVAL}}"

    def mean(self, tasks: tuple[str, ...]) -> str:
        """The mean over `tasks` (%) and its bootstrap interval (`uncertainty.mean_interval`); `–` unless the column
        scored every one."""
        if not all(task in self.accuracies for task in tasks):
            return NO_SCORE
        interval = None if self.cells is None else uncertainty.mean_interval(
            [self.cells[task] for task in tasks], [self.key(task) for task in tasks])
        text = "" if interval is None else interval.text()
        return f"{100 * math.fsum(self.accuracies[task] for task in tasks) / len(tasks):6.2f} {text:<{INTERVAL}}"

    def key(self, task: str) -> tuple:
        cell, key = self.cells[task], self.keys.get(task)
        return key if key is not None and key[-1] == cell.size else (None, task, cell.size)


def run_column(run) -> Column:
    """The run's last test row (the accuracies it printed), with its flags (none for a run written before they were
    kept) keyed as the run's intervals key them, so its mean's interval is its OA's."""
    row = dict(zip(run.tasks, run.accuracy_matrix[-1], strict=True))
    if not run.test_flags:
        return Column(row, None, {})
    cells = {task: flags.unpack(cell) for task, cell in zip(run.tasks, run.test_flags[-1], strict=True)}
    return Column(row, cells, {task: uncertainty.task_key(run, j, cells[task].size)
                               for j, task in enumerate(run.tasks)})


def eval_plan(args, run) -> tuple:
    """The configuration (`SCORED_AS` as the run recorded it, the options given in its place) and the tasks to score:
    the run's, or with --order / --max-tasks the order's first N; printed, with each option given in place of the
    run's value and the tasks the model never trained on. Without a run: --order is required."""
    from jumplora.config import RunConfig

    given = {name: getattr(args, name) for name in options.command_fields("eval") if name in options.given(args)}
    if "data_dir" in given:
        given["data_dir"] = location.resolve_data_dir(given["data_dir"], synthetic_default=True)
    if run is None:
        if "order" not in given:
            raise JumpLoRAError(f"{args.model_dir} records no run (a --save-model folder, or a model logged without "
                                "its run's results.json): pass --order N, and the run's --seed and caps to score the "
                                "examples it scored")
        config = RunConfig.of(given)
        return config, first_tasks(config, config.max_tasks)
    recorded = {**{name: value for name, value in run.config.items() if name in SCORED_AS}, "order": run.order}
    data_dir = recorded.get("data_dir")
    if "data_dir" not in given and data_dir is not None and not Path(data_dir).is_dir():
        raise JumpLoRAError(f"the run read its data from {data_dir}, which is not a folder here: pass --data-dir of "
                            "that data")
    config = RunConfig.of({**recorded, **given, "max_tasks": None})
    trained = tuple(run.tasks)
    tasks = first_tasks(config, given.get("max_tasks", len(trained))) if {"order", "max_tasks"} & set(given) \
        else trained

    def shown(name: str, value) -> str:
        return {"data_dir": location.SYNTHETIC, "max_train_per_task": "all", "max_eval_per_task": "all"}.get(name) \
            if value is None else str(value)

    print(f"as its run scored it: order {run.order}, the {len(trained)} task(s) it trained, seed {run.seed}, data "
          f"{shown('data_dir', data_dir)}, --max-eval-per-task "
          f"{shown('max_eval_per_task', recorded.get('max_eval_per_task'))}")
    before = {**RunConfig().to_dict(), **recorded, "max_tasks": len(trained)}
    for name, value in given.items():
        option = f"--{name.replace('_', '-')}"
        if value == before[name]:
            continue
        if isinstance(value, bool):  # a flag, given: the run was not
            print(f"{option}, which the run was not given")
        else:
            was = f"{len(trained)} trained tasks" if name == "max_tasks" else shown(name, before[name])
            print(f"{option} {shown(name, value)} in place of the run's {was}")
    untrained = [task for task in tasks if task not in trained]
    if untrained:
        print(f"the model never trained on {', '.join(untrained)}: the run has no score for it (–)")
    return config, tasks


def first_tasks(config, count: int | None) -> tuple[str, ...]:
    """The first `count` tasks (None: all) of the configuration's order."""
    from jumplora.data import order_tasks

    every = order_tasks(config.data_dir, config.order)
    if count is not None and count > len(every):
        raise JumpLoRAError(f"--max-tasks {count}, but order {config.order} has {len(every)} tasks")
    return tuple(every[:count])


def score_tasks(config, tasks: tuple[str, ...], model_dir: Path, progress: bool):
    """The test accuracy on each of `tasks` of the model in `model_dir` and its flags (a `continual.Evaluation`),
    its data read, encoded and scored as a run of `config` does it."""
    from jumplora.continual import Workspace, evaluate, resolve_device, run_benchmark
    from jumplora.data.encode import PromptEncoder
    from jumplora.families import is_causal
    from jumplora.models import load_model

    benchmark = run_benchmark(config, tasks)
    model, tokenizer = load_model(str(model_dir), cache_dir=model_dir, progress=False)
    device = resolve_device(config.device)
    model.to(device).requires_grad_(False)
    encoder = PromptEncoder(tokenizer, config.max_source_tokens, config.max_target_tokens, causal=is_causal(model))
    encoded = {task: {"test": encoder.encode_all(benchmark.tasks[task].spec, benchmark.tasks[task].test)}
               for task in tasks}
    ws = Workspace(config, benchmark, tasks, [], model, tokenizer, encoded, device)
    return evaluate(ws, tasks, "test", progress=progress)

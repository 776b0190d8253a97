"""`jumplora eval`: a merged model's test accuracy on the tasks its run trained, scored as its run scored them
(`jumplora.cli` builds its parser and calls it)."""

from __future__ import annotations

import json
from pathlib import Path

from jumplora import options, tracking
from jumplora.data import location
from jumplora.errors import JumpLoRAError

# what decides a run's test scores besides its model: how it read and encoded its data and how it scored them; eval
# takes them from the run (its results.json), its options (`jumplora eval --help`) override some
SCORED_AS = ("order", "data_dir", "seed", "max_train_per_task", "max_eval_per_task", "strict", "max_source_tokens",
             "max_target_tokens", "eval_batch_size", "eval_mode", "precision", "authors_compat")


def eval_command(args) -> int:
    """The test accuracy of a merged model on the tasks its run trained, scored as that run scored them
    (`eval_plan`), printed beside the run's last test row, so that a run's own model shows the numbers the run
    printed; without a recorded run (a --save-model folder), on --order's tasks as the options say."""
    if {"order", "data_dir"} <= options.given(args):  # an unknown order of the data given, before anything loads
        from jumplora.data.orders import order_tasks  # (without --data-dir: the run's data, read with the run)

        order_tasks(location.resolve_data_dir(args.data_dir, synthetic_default=True), args.order)
    run = tracking.recorded_run(args.model_dir, args.tracking_uri)
    config, tasks = eval_plan(args, run)
    with tracking.model_folder(args.model_dir, args.tracking_uri) as model_dir:
        scores = dict(zip(tasks, score_tasks(config, tasks, model_dir, progress=not args.quiet), strict=True))
    ran = dict(zip(run.tasks, run.accuracy_matrix[-1], strict=True)) if run is not None else {}
    columns = [scores, ran] if run is not None else [scores]

    def cells(values: list[float | None]) -> str:
        return " ".join(f"{'–':>6}" if value is None else f"{100 * value:6.2f}" for value in values)

    print(f"{'task':<10} {'eval':>6}" + (f" {'run':>6}" if run is not None else ""))
    for task in tasks:
        print(f"{task:<10} {cells([column.get(task) for column in columns])}")
    means = [sum(c[t] for t in tasks) / len(tasks) if all(t in c for t in tasks) else None for c in columns]
    print(f"{'mean':<10} {cells(means)}")
    if args.json:
        print(json.dumps(scores))
    return 0


def eval_plan(args, run) -> tuple:
    """The configuration (`SCORED_AS` as the run recorded it, with the options given in its place) and the tasks to
    score: those the run trained, or with --order / --max-tasks the order's first N (N: the run's count unless
    given). One line says how the run was scored, one per option given in place of the run's value, one names the
    tasks the model never trained on. Without a run: --order is required, the options give the rest."""
    from jumplora.config import RunConfig
    from jumplora.data import order_tasks

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
    recorded = {name: value for name, value in (run.config or {}).items() if name in SCORED_AS}
    recorded["order"] = run.order
    data_dir = recorded.get("data_dir")
    if "data_dir" not in given and data_dir is not None and not Path(data_dir).is_dir():
        raise JumpLoRAError(f"the run read its data from {data_dir}, which is not a folder here: pass --data-dir of "
                            "that data")
    config = RunConfig.of({**recorded, **given, "max_tasks": None})
    trained = tuple(run.tasks or order_tasks(data_dir, run.order)[: len(run.accuracy_matrix[-1])])
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


def score_tasks(config, tasks: tuple[str, ...], model_dir: Path, progress: bool) -> list[float]:
    """The test accuracy on each of `tasks` of the model in `model_dir`, its data read, encoded and scored as a run
    of `config` reads, encodes and scores them (`run_benchmark`, `continual.evaluate`)."""
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
    return evaluate(ws, tasks, "test", progress=progress).accuracies

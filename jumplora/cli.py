"""`jumplora` command line: run, orders, data check / build, eval, report, track, inside every entry point's boundary
(`errors.entry_point`). Bad input (a usage error, a value of the wrong kind, a path the operating system refuses, a
write that fails for a full disk, no permission or a read-only file system) → one line on stderr and exit code 2; an
exception no check expected → one line naming it and the file holding its traceback, exit code 3."""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from pathlib import Path

from jumplora import options, ownership, tracking
from jumplora.data import location
from jumplora.errors import JumpLoRAError, entry_point, writing
from jumplora.kinds import (
    FOLDER,
    MODEL_URIS,
    NEW,
    TRACKING_SCHEMES,
    WRITABLE,
    Items,
    PathKind,
    Text,
    Uri,
)

DEFAULT_RUNS_ROOT = Path("runs")


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Append "(default: …)" to an option's help, except where the help already says what its default means or
    there is none to show (None: required, or "not given"; False: a flag, off unless given)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False or "(default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def add_run_parser(sub) -> None:
    p = sub.add_parser("run", help="train one continual sequence and write a run directory",
                       formatter_class=DefaultsHelpFormatter)
    options.add_config_options(p, "run")
    ownership.writes(p.add_argument(
        "--out", default=None, type=PathKind(WRITABLE), help="run directory (default: "
        "runs/order<N>-<method>-seed<S>); a run cut off there goes on after its last finished task when run again "
        "with the same options and data"), ownership.RUN)
    ownership.writes(p.add_argument("--save-model", type=PathKind(WRITABLE, result=Path), default=None,
                                    help="also save the final merged model (Hugging Face format) to this directory"),
                     ownership.MODEL)
    ownership.add_overwrite(p, "; a run cut off at --out starts over instead of going on")
    p.add_argument("--save-merged-model", action="store_true",
                   help="save the final merged model (Hugging Face format) to <out>/merged_model and log it to MLflow "
                        "as a model (a LoggedModel of the run)")
    tracking.add_register_option(p)
    ownership.writes(p.add_argument("--cache-dir", type=PathKind(WRITABLE, result=Path),
                                    default=DEFAULT_RUNS_ROOT / "cache",
                                    help="where the tiny preset and single-task baselines are cached"),
                     ownership.CACHE)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    tracking.add_options(p)


def run_directory(text: str | None, config) -> Path:
    """`--out` (an empty one would be the current directory), else the default name under runs/."""
    if text is None:
        return DEFAULT_RUNS_ROOT / f"order{config.order}-{config.method}-seed{config.seed}"
    if not text.strip():
        raise JumpLoRAError(f"--out {text!r} names no directory: pass one, such as runs/my-run")
    return Path(text)


def run_command(args) -> int:
    """Check everything (what it will write: `ownership`), then, holding the run directory's lock, load the data and
    the model and train into it."""
    from jumplora.config import RunConfig, check_device
    from jumplora.continual import prepare
    from jumplora.lock import DirectoryLock
    from jumplora.methods import check
    from jumplora.models import with_data_located

    config = with_data_located(RunConfig.of(options.config_fields(args, "run")))
    check(config, options.given(args))
    check_device(config.device)
    tracking.from_args(args)  # a store that can never answer is refused before any work
    out = run_directory(args.out, config)
    ownership.check_run(out, args.save_model, args.cache_dir, args.overwrite)
    with DirectoryLock(out, "jumplora run", "pass another --out"):  # before the model loads: a refusal is quick
        return train_into(out, prepare(config, args.cache_dir, progress=not args.quiet), args)


def train_into(out: Path, ws, args) -> int:
    """The run in `out`: resumed from its newest intact checkpoint, or (`--overwrite`) written beside it and
    swapped in when complete; a checkpoint after each task; MLflow logged live (`jumplora track` logs afterwards what
    a failed store missed)."""
    from jumplora import checkpoints
    from jumplora.continual import ContinualState, run_continual, single_task_baselines, summarise
    from jumplora.outputs import RESULTS, format_summary, write_run
    from jumplora.ownership import staging_dir, swap_in

    ownership.finish_swap(out, RESULTS, ownership.RUN)
    ownership.refuse_finished(out, ownership.RUN, "--out", args.overwrite)  # completed by another run meanwhile
    target = staging_dir(out) if args.overwrite and out.is_dir() and any(out.iterdir()) else out
    if args.overwrite and staging_dir(out).exists():  # what an interrupted --overwrite left (checked: only ours)
        ownership.remove_owned(staging_dir(out), ownership.RUN)
    ownership.claim(target, ownership.RUN, "jumplora run")
    progress = not args.quiet
    base_state = {k: v.detach().clone() for k, v in ws.model.state_dict().items()} \
        if ws.config.single_task_baselines else None
    state = ContinualState() if args.overwrite else resumed(out, ws)
    tracker = tracking.from_args(args)
    log = tracking.ContinualLogger(tracker, out.name, tracking.run_key(out, ws.config.to_dict()))
    log.begin(tracking.logged_config(ws.config.to_dict(), ws.lambdas), list(ws.tasks),
              ws.benchmark.fingerprint, replace=args.overwrite, tags=tracking.run_dir_tag(out))
    for t, record in enumerate(state.records):  # restored tasks that the cut-off run could not log
        log.on_task(t, record)

    def after_task(ws, state, t) -> None:
        checkpoints.save_in_run(target, ws, state)
        ownership.seal(target, ownership.RUN, "jumplora run")
        log.on_task(t, state.records[t])

    try:
        state = run_continual(ws, state, progress=progress, on_task=after_task)
        baselines = single_task_baselines(ws, base_state, args.cache_dir, progress) if base_state is not None \
            else None
        results = summarise(ws, state, baselines)
        merged = args.save_merged_model or args.register_model
        if args.save_model is not None:
            save_model(ws, args.save_model, "--save-model", args.overwrite)
        if merged:  # part of the run being written: replaced as the run is
            save_model(ws, target / tracking.MERGED_MODEL_DIR, "--save-merged-model", True)
        with writing(target):
            tracking.request_registration(target, args.register_model)
        write_run(target, results, [record.update for record in state.records])
        checkpoints.drop_run_checkpoints(target)
        ownership.seal(target, ownership.RUN, "jumplora run")
        if target != out:
            swap_in(target, out, ownership.RUN)
    except BaseException as error:
        log.fail("KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED")
        if target != out:  # --overwrite starts over anyway; the old run stays as it was
            shutil.rmtree(target, ignore_errors=True)
        raise
    log.end(results, out)
    print(format_summary(results), end="")
    if tracker.failed:
        print(f"MLflow logging failed (see the warning above): `jumplora track {out} --tracking-uri {tracker.uri}` "
              "logs this run once the store answers")
    print(f"run directory: {out}")
    return 0


def resumed(out: Path, ws):
    """The state of the newest intact checkpoint of `out` (a fresh one without), checked against this run's
    configuration; one line on stderr says where the run goes on."""
    from jumplora import checkpoints
    from jumplora.continual import n_trainings

    try:
        state = checkpoints.resume_in_run(out, ws)
    except checkpoints.ConfigMismatchError as error:
        raise JumpLoRAError(f"{out} holds a run cut off under other settings or data ({error}): run it again with "
                            "its own options and data to resume it, or pass --overwrite or another --out") from None
    if state.records:
        print(f"resuming {out} after training {len(state.records)} of {n_trainings(ws)} ({state.records[-1].task})",
              file=sys.stderr)
    return state


def save_model(ws, directory: Path, option: str, overwrite: bool) -> None:
    """The merged model and its tokenizer (Hugging Face format), written aside and put in place once complete
    (`ownership.written_aside`: a saved model there, checked by `ownership.check_run`, replaced only with
    `overwrite`)."""
    with ownership.written_aside(directory, ownership.MODEL, "jumplora run --save-model", option, overwrite) as where:
        ws.model.save_pretrained(where)
        ws.tokenizer.save_pretrained(where)


def orders_command(args) -> int:
    from jumplora.data import load_orders

    for order, tasks in load_orders(args.data_dir).items():
        print(f"{order}: {', '.join(tasks)}")
    return 0


def data_check_command(args) -> int:
    """The validation table, then what stops a run (a task named twice in tasks.json, a split with no usable
    example, a prompt leaving no room for the text) and what trains badly (a one-class train split). Exit 1 on
    anything that stops a run, and with --strict on any problem at all."""
    from jumplora.data import format_report, validate_cl_benchmark
    from jumplora.data.cl_benchmark import task_specs
    from jumplora.data.tasks import duplicate_keys
    from jumplora.data.validate import blocking_findings, one_class_findings

    tasks_json = Path(args.dir) / "tasks.json"
    blocking = [f"{tasks_json}: {text}" for text in duplicate_keys(tasks_json)] if tasks_json.is_file() else []
    counter, encoder = None, None
    if args.tokenizer is not None:
        from transformers import AutoTokenizer

        from jumplora.data.encode import PromptEncoder

        try:
            tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        except (OSError, ValueError) as error:  # missing, not a tokenizer: the library's words, as for a model
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise JumpLoRAError(f"--tokenizer {args.tokenizer}: cannot load a tokenizer ({reason}): pass a hub name "
                                "or a folder written by save_pretrained") from None
        encoder = PromptEncoder(tokenizer, args.max_source_tokens)
        counter = encoder.source_length
    reports = validate_cl_benchmark(args.dir, count_source_tokens=counter, max_source_tokens=args.max_source_tokens,
                                    allow_duplicate_keys=True)
    print(format_report(reports))
    if encoder is None:
        print("(source lengths not checked: pass --tokenizer NAME_OR_PATH to count tokens)")
    else:
        limit, specs = args.max_source_tokens, task_specs(args.dir, allow_duplicate_keys=True).values()
        blocking += [f"task {spec.name!r}: its prompt takes {limit - encoder.text_room(spec)} tokens, leaving no room "
                     f"for the text in --max-source-tokens {limit}" for spec in specs if encoder.text_room(spec) < 1]
    blocking += blocking_findings(reports)
    findings = one_class_findings(reports)
    for title, lines in (("problems that stop a run:", blocking), ("findings:", findings)):
        if lines:
            print("\n".join([title, *(f"  {line}" for line in lines)]))
    problems = sum(report.problems for report in reports)
    print(f"{len({r.task for r in reports})} tasks, {len(reports)} splits, {problems} examples dropped or relabelled, "
          f"{len(blocking)} problem(s) that stop a run, {len(findings)} other finding(s)")
    return 1 if blocking or (args.strict and (problems or findings)) else 0


def data_build_command(args) -> int:
    from jumplora.data import builder

    out = args.out or location.DEFAULT_DATA_DIR
    print(f"building CL_Benchmark in {out} from the Hugging Face Hub", flush=True)
    written = builder.build_cl_benchmark(out, tasks=args.tasks)
    print(f"wrote {written}")
    return 0


def data_command(args) -> int:
    return {"check": data_check_command, "build": data_build_command}[args.data_command](args)


# what decides a run's test scores besides its model: how it read and encoded its data and how it scored them; eval
# takes them from the run (its results.json), its options (`jumplora eval --help`) override some
SCORED_AS = ("order", "data_dir", "seed", "max_train_per_task", "max_eval_per_task", "strict", "max_source_tokens",
             "max_target_tokens", "eval_batch_size", "eval_mode", "precision", "authors_compat")


def eval_command(args) -> int:
    """The test accuracy of a merged model on the tasks its run trained, scored as that run scored them
    (`eval_plan`), printed beside the run's last test row, so that a run's own model shows the numbers the run
    printed; without a recorded run (a --save-model folder), on --order's tasks as the options say."""
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


def report_command(args) -> int:
    from jumplora.report import REPORT_HTML, REPORT_MD, write_report

    ownership.check_written_aside(args.out, ownership.REPORT, "--out", args.overwrite)
    _, text = write_report(args.sources, args.out, args.tracking_uri, args.overwrite)
    print(text, end="")
    print(f"report: {args.out / REPORT_MD}, {args.out / REPORT_HTML}")
    return 0


def track_command(args) -> int:
    """Log each source to MLflow as its run would have logged itself; one line per source says what was done."""
    sources = [checked_track_source(source) for source in args.sources]  # bad input fails before anything is logged
    tracker = tracking.Tracker(tracking.open_store(tracking.resolve_uri(args.tracking_uri), writes=True))
    for kind, source in sources:
        line = track_run_directory(tracker, source) if kind == "run" else ray_track().catch_up(tracker, source)
        if tracker.failed:
            print(f"jumplora: error: MLflow at {tracker.uri} failed: run `jumplora track` again once it answers",
                  file=sys.stderr)
            return 1
        print(line)
    return 0


def ray_track():
    """`ray_jobs.track`, which logs the Ray jobs' folders (installed with jumplora; it needs the ray extra's
    pyarrow)."""
    try:
        from ray_jobs import track
    except ImportError as error:
        raise JumpLoRAError(f"logging a grid or train_sequence.py folder needs the ray extra: pip install "
                            f"'jumplora[ray]' ({error})") from None
    return track


def checked_track_source(source: str) -> tuple[str, str]:
    """`classify_track_source`, and what it holds read as data (as `jumplora report` reads a results.json: schema,
    keys, types, finite numbers; a grid's manifest), so that a damaged source is refused before anything is logged."""
    from jumplora.outputs import RESULTS
    from jumplora.report import read_run

    kind, found = classify_track_source(source)
    if kind == "ray":
        ray_track().check(found)
    elif (Path(found) / RESULTS).exists():
        read_run(Path(found) / RESULTS, found)
    return kind, found


def classify_track_source(source: str) -> tuple[str, str]:
    """("run", a `jumplora run` directory) or ("ray", a grid_lambda.py / train_sequence.py folder, path or URI)."""
    from jumplora.checkpoints import RUN_CHECKPOINTS
    from jumplora.outputs import RESULTS

    if "://" in source:
        return "ray", source
    path = Path(source)
    if not path.is_dir():
        raise JumpLoRAError(f"{source} is not a directory: pass a run directory or a grid / train_sequence.py folder")
    if (path / "manifest.json").exists() or (path / "job.json").exists():
        return "ray", source
    if path.name == "run" and any((path.parent / name).exists() for name in ("manifest.json", "job.json")):
        return "ray", str(path.parent)  # the run directory a grid or train_sequence.py published
    if (path / "single_task.json").exists() or (path.name == "run" and path.parent.parent.name == "runs"):
        raise JumpLoRAError(f"{source} belongs to a reproduce.py sweep: submit the sweep again, which logs it")
    if not ((path / RESULTS).exists() or (path / RUN_CHECKPOINTS).is_dir()):
        raise JumpLoRAError(f"{source} holds no {RESULTS} and no checkpoints: pass a `jumplora run` directory or a "
                            "grid / train_sequence.py folder")
    return "run", source


def track_run_directory(tracker, source: str) -> str:
    """A finished run directory logged; of an unfinished one whose process is gone, the runs it left RUNNING marked
    KILLED; one being written is left to its process."""
    from jumplora.lock import DirectoryLock
    from jumplora.outputs import RESULTS
    from jumplora.results import read_results
    from jumplora.uncertainty import NO_FLAGS

    run_dir = Path(source)
    if (run_dir / RESULTS).exists():
        before = tracker.changes
        tracking.log_run_directory(tracker, run_dir)
        note = f"; {NO_FLAGS}" if read_results(run_dir / RESULTS).intervals is None else ""
        return f"{run_dir}: {tracking.logged_since(tracker, before)}{note}"
    holder = DirectoryLock(run_dir, "", "").read()
    if holder is not None and holder.is_gone() is not True:
        return f"{run_dir}: being written by {holder.describe()}, which logs it itself"
    closed = tracking.close_interrupted(tracker, run_dir)
    return (f"{run_dir}: not finished (no {RESULTS}) and no process writes it: {len(closed)} MLflow run(s) it left "
            "RUNNING marked KILLED; run its `jumplora run` command again to go on with it")


def build_parser() -> argparse.ArgumentParser:
    parser = options.Parser(prog="jumplora",
                            description="JumpLoRA continual learning of T5 and decoder-only language models.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=options.Parser, metavar="COMMAND")
    add_run_parser(sub)
    p = sub.add_parser("orders", help="list the task orders")
    p.add_argument("--data-dir", default=None, type=PathKind(FOLDER),
                   help="CL_Benchmark directory whose tasks.json to read (default: paper)")
    p = sub.add_parser("data", help="data tools")
    data_sub = p.add_subparsers(dest="data_command", required=True, parser_class=options.Parser, metavar="COMMAND")
    check = data_sub.add_parser("check", help="validate every task and split of a CL_Benchmark directory")
    check.add_argument("dir", type=PathKind(FOLDER), help="CL_Benchmark directory")
    check.add_argument("--strict", action="store_true",
                       help="exit 1 on any problem or finding (without it: only on one that stops a run)")
    check.add_argument("--tokenizer", default=None, type=Text(),
                       help="tokenizer (hub name or path) to count source tokens with (default: no length check)")
    options.add_config_options(check, "data-check", helps={"max_source_tokens": "report sources longer than this"})
    build = data_sub.add_parser("build", help="download the paper's tasks from the Hugging Face Hub and write a "
                                "CL_Benchmark directory (needs the extra jumplora[build-data])")
    ownership.writes(build.add_argument("--out", default=None, type=PathKind(NEW), help="directory to write, which "
                                        f"must not exist yet (default: {location.DEFAULT_DATA_DIR}, where runs of a "
                                        "real model look for the data)"), ownership.DATA)
    build.add_argument("--tasks", default=None, type=Items(Text(), example="dbpedia,amazon"),
                       help="comma-separated task names (default: all 15)")
    p = sub.add_parser("eval", help="test accuracy of a run's merged model, scored as its run scored it",
                       formatter_class=DefaultsHelpFormatter,
                       description="Test accuracy of a merged model on the tasks its run trained, with the run's "
                                   "order, data, seed and caps (its results.json, or the one logged with the model's "
                                   "run), beside the run's last test row; an option given scores otherwise, said in "
                                   "one line. A --save-model folder records no run: --order is then required, and "
                                   "the other options default as for `jumplora run` of the tiny model.")
    p.add_argument("model_dir", metavar="RUN_DIR_OR_MODEL", type=PathKind(FOLDER, uris=MODEL_URIS),
                   help="a run directory written with --save-merged-model (or its merged_model folder), a logged "
                        "model's URI (models:/NAME/VERSION, models:/m-<id>, runs:/<run id>/merged_model), or a "
                        "--save-model folder")
    options.add_config_options(p, "eval", helps={"max_tasks": "score the first N tasks of the order"},
                               default_texts={**dict.fromkeys(options.command_fields("eval"), "the run's"),
                                              "max_tasks": "the tasks the run trained"})
    p.add_argument("--json", action="store_true", help="also print the accuracies as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--tracking-uri", default=None, type=Uri(TRACKING_SCHEMES),
                   help="MLflow store of a model URI (default: $MLFLOW_TRACKING_URI, else sqlite:///<runs>/mlflow.db)")
    p = sub.add_parser("report", help="the paper's tables (mean ± std over seeds) from runs, as Markdown and HTML",
                       formatter_class=DefaultsHelpFormatter,
                       description="The paper's tables (mean ± std over seeds) from runs, as Markdown and HTML. A "
                                   "damaged results.json found in a folder or an experiment is skipped with a "
                                   "warning naming it; one named directly (or a source with nothing usable) is an "
                                   "error.")
    p.add_argument("sources", nargs="+", metavar="RUN_DIR_OR_EXPERIMENT", type=Text(),
                   help="run directories (or folders holding them) or MLflow experiment names (jumplora-order1)")
    ownership.writes(p.add_argument("--out", type=PathKind(WRITABLE, result=Path),
                                    default=DEFAULT_RUNS_ROOT / "report", help="where report.md/.html/.json go"),
                     ownership.REPORT)
    ownership.add_overwrite(p)
    p.add_argument("--tracking-uri", default=None, type=Uri(TRACKING_SCHEMES),
                   help="MLflow store of the experiments (default: $MLFLOW_TRACKING_URI, else runs/mlflow.db)")
    p = sub.add_parser("track", help="log finished runs and grids to MLflow afterwards (when the store was down)",
                       formatter_class=DefaultsHelpFormatter,
                       description="Log run directories and grid_lambda.py / train_sequence.py folders to MLflow as "
                                   "they would have logged themselves, under the same keys: what the store already "
                                   "holds is not logged twice, so running it again adds nothing. An unfinished run "
                                   "whose process is gone has its runs left RUNNING marked KILLED.")
    p.add_argument("sources", nargs="+", metavar="RUN_DIR_OR_GRID", type=Text(),
                   help="`jumplora run` directories, or grid / train_sequence.py folders (paths or URIs)")
    p.add_argument("--tracking-uri", default=None, type=Uri(TRACKING_SCHEMES),
                   help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///<runs>/mlflow.db)")
    return parser


COMMANDS = {"run": run_command, "orders": orders_command, "data": data_command, "eval": eval_command,
            "report": report_command, "track": track_command}


def main(argv: list[str] | None = None) -> int:
    """`jumplora`: its arguments parsed and its command run inside every entry point's boundary
    (`errors.entry_point`): bad input one line and exit code 2, an interrupt 130, a bug one line and 3."""
    argv = sys.argv[1:] if argv is None else argv
    command = f"jumplora {argv[0]}" if argv and argv[0] in COMMANDS else "jumplora"
    resume = ": run the same command again to go on after the last finished task" if command == "jumplora run" else ""
    return entry_point(lambda: parse_and_run(argv), command, "jumplora: error: ",
                       f"jumplora: interrupted; no results.json was written{resume}")


def parse_and_run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    return COMMANDS[args.command](args)


if __name__ == "__main__":
    sys.exit(main())

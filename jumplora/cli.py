"""`jumplora` command line: run, orders, data check / build, eval, report, track. Bad input (and a write that fails
for a full disk, no permission or a read-only file system) → one line on stderr and exit code 2; an exception no
check expected → one line naming it and the file holding its traceback, exit code 3 (`errors.report_bug`)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
from pathlib import Path

from safetensors import SafetensorError

from jumplora import options, ownership, tracking
from jumplora.data import location
from jumplora.errors import EXIT_BAD_INPUT, JumpLoRAError, removed_on_failure, report_bug, write_error, writing
from jumplora.kinds import (
    FOLDER,
    MODEL_URIS,
    NEW,
    POSITIVE_INT,
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
    there is none to show (None: required, or "not given")."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or "(default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


class OneLineErrorParser(argparse.ArgumentParser):
    """Usage errors as one line (`jumplora: error: …; see --help`) and exit code 2, like every other bad input."""

    def error(self, message: str):
        self.exit(2, f"jumplora: error: {message} (see `{self.prog} --help`)\n")


def add_run_parser(sub) -> None:
    p = sub.add_parser("run", help="train one continual sequence and write a run directory",
                       formatter_class=DefaultsHelpFormatter)
    options.add_config_options(p, "run")
    ownership.writes(p.add_argument(
        "--out", default=None, type=PathKind(WRITABLE), help="run directory (default: "
        "runs/order<N>-<method>-seed<S>); a run cut off there goes on after its last finished task when run again "
        "with the same options and data"), ownership.RUN)
    p.add_argument("--overwrite", action="store_true",
                   help="start over, also over a completed run: the new run is written beside --out and takes its "
                        "place once complete (only over a run directory: never over files jumplora did not write)")
    ownership.writes(p.add_argument("--save-model", type=PathKind(WRITABLE, result=Path), default=None,
                                    help="also save the final merged model (Hugging Face format) to this directory"),
                     ownership.MODEL)
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
    from jumplora.outputs import RESULTS

    config = with_data_located(RunConfig.of(options.config_fields(args, "run")))
    check(config, options.given(args))
    check_device(config.device)
    tracking.from_args(args)  # a store that can never answer is refused before any work
    out = run_directory(args.out, config)
    ownership.check_run(out, args.save_model, args.cache_dir)
    if (out / RESULTS).exists() and not args.overwrite:
        raise JumpLoRAError(f"{out} already holds a completed run: pass --overwrite or another --out")
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
    if (out / RESULTS).exists() and not args.overwrite:  # completed by another run while this one prepared
        raise JumpLoRAError(f"{out} already holds a completed run: pass --overwrite or another --out")
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
        for directory in (args.save_model, target / tracking.MERGED_MODEL_DIR if merged else None):
            if directory is not None:
                save_model(ws, directory)
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


def save_model(ws, directory: Path) -> None:
    """The merged model and its tokenizer (Hugging Face format), written aside and renamed into place; a saved model
    there before (checked: `ownership.check_run`) is swapped out only once the new one is complete."""
    where = ownership.aside_of(directory)
    with writing(directory), removed_on_failure(where):
        if where.exists():  # what a cut-off save left (checked: only ours)
            ownership.remove_owned(where, ownership.MODEL)
        ownership.claim(where, ownership.MODEL, "jumplora run --save-model")
        ws.model.save_pretrained(where)
        ws.tokenizer.save_pretrained(where)
        ownership.seal(where, ownership.MODEL, "jumplora run --save-model")
        if directory.exists():
            ownership.swap_in(where, directory, ownership.MODEL)
        else:
            os.rename(where, directory)


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

        encoder = PromptEncoder(AutoTokenizer.from_pretrained(args.tokenizer), args.max_source_tokens)
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


def eval_command(args) -> int:
    from jumplora.data import load_benchmark, order_tasks
    from jumplora.data.encode import PromptEncoder
    from jumplora.evaluation import accuracy
    from jumplora.families import is_causal
    from jumplora.models import load_model

    data_dir = location.resolve_data_dir(args.data_dir, synthetic_default=True)
    benchmark = load_benchmark(data_dir, seed=args.seed, max_train_per_task=args.max_train_per_task,
                               max_eval_per_task=args.max_eval_per_task, strict=args.strict,
                               tasks=order_tasks(data_dir, args.order))
    with tracking.model_folder(args.model_dir, args.tracking_uri) as model_dir:
        model, tokenizer = load_model(str(model_dir), cache_dir=model_dir, progress=False)
    encoder = PromptEncoder(tokenizer, causal=is_causal(model))
    scores = {}
    for task in benchmark.order(args.order):
        data = benchmark.tasks[task]
        scores[task] = accuracy(model, tokenizer, encoder.encode_all(data.spec, data.test), progress=not args.quiet)
        print(f"{task:<10} {100 * scores[task]:6.2f}")
    print(f"mean       {100 * sum(scores.values()) / len(scores):6.2f}")
    if args.json:
        print(json.dumps(scores))
    return 0


def report_command(args) -> int:
    from jumplora.report import REPORT_HTML, REPORT_MD, write_report

    ownership.check(args.out, ownership.REPORT, "--out")
    _, text = write_report(args.sources, args.out, args.tracking_uri)
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
    parser = OneLineErrorParser(prog="jumplora",
                                description="JumpLoRA continual learning of T5 and decoder-only language models.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineErrorParser)
    add_run_parser(sub)
    p = sub.add_parser("orders", help="list the task orders")
    p.add_argument("--data-dir", default=None, type=PathKind(FOLDER),
                   help="CL_Benchmark directory whose tasks.json to read (default: paper)")
    p = sub.add_parser("data", help="data tools")
    data_sub = p.add_subparsers(dest="data_command", required=True, parser_class=OneLineErrorParser)
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
    p = sub.add_parser("eval", help="accuracy of a saved merged model on an order's tasks",
                       formatter_class=DefaultsHelpFormatter)
    p.add_argument("model_dir", metavar="MODEL", type=PathKind(FOLDER, uris=MODEL_URIS),
                   help="directory written by `jumplora run --save-model`, or a logged model's URI: "
                        "models:/NAME/VERSION, models:/m-<id>, runs:/<run id>/merged_model")
    p.add_argument("--order", type=POSITIVE_INT, required=True, help="task order")
    options.add_config_options(p, "eval", default_texts={"data_dir": location.SYNTHETIC})
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
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:  # --help, or a usage error already printed as one line
        return int(stop.code or 0)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        return COMMANDS[args.command](args)
    except JumpLoRAError as error:
        print(f"jumplora: error: {error}", file=sys.stderr)
        return 2
    except (OSError, SafetensorError) as error:  # a write not wrapped in `errors.writing` (a library's cache)
        converted = write_error(error)
        if converted is None:
            return report_bug(error, f"jumplora {args.command}")
        print(f"jumplora: error: {converted}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        resume = ": run the same command again to go on after the last finished task" if args.command == "run" else ""
        print(f"jumplora: interrupted; no results.json was written{resume}", file=sys.stderr)
        return 130
    except Exception as error:  # a bug: one line, the traceback in a file (`errors.report_bug`)
        return report_bug(error, f"jumplora {args.command}")


if __name__ == "__main__":
    sys.exit(main())

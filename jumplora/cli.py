"""`jumplora` command line: run, orders, data check / build, eval, report, track, inside every entry point's boundary
(`errors.entry_point`: bad input is one line and exit code 2). Every command's parser is built here; `run`, `eval` and
`track` run in modules of their own, and what a command needs beyond its options (torch, the models, MLflow's client)
is imported when it runs, so that `jumplora --help` loads none of it."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from pathlib import Path

from jumplora import options, ownership, tracking
from jumplora.adapter_kinds import resolve
from jumplora.cli_run import DEFAULT_RUNS_ROOT
from jumplora.data import location
from jumplora.errors import JumpLoRAError, entry_point
from jumplora.kinds import FOLDER, MODEL_URIS, NEW, WRITABLE, Items, PathKind, Text


def add_run_parser(sub) -> None:
    p = sub.add_parser("run", help="train one continual sequence and write a run directory")
    options.add_config_options(p, "run")
    ownership.writes(p.add_argument(
        "--out", default=None, type=PathKind(WRITABLE), help="run directory (default: "
        "runs/order<N>-<method>-seed<S>); a run cut off there goes on after its last finished task when run again "
        "with the same options and data"), ownership.RUN)
    ownership.writes(p.add_argument("--save-model", type=PathKind(WRITABLE, result=Path), default=None,
                                    help="also save the final merged model (Hugging Face format) to this directory"),
                     ownership.MODEL)
    ownership.add_overwrite(p, "; a run cut off at --out starts over instead of going on")
    tracking.add_model_options(p, "<out>/merged_model")
    options.add_cache_dir(p)
    add_quiet(p)
    tracking.add_options(p)


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
    encoder = None
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
    counter = None if encoder is None else encoder.source_length
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


def report_command(args) -> int:
    from jumplora.report.render import REPORT_HTML, REPORT_MD, write_report

    # --out lies in none of the folders the report reads: their runs' folders are theirs, and a report inside one
    # would be read as part of it next time (a recorded run directory is refused anywhere: `ownership.check_target`)
    inside = Path(os.path.abspath(args.out))
    for source in args.sources:
        folder = Path(os.path.abspath(os.path.expanduser(source)))
        if folder.is_dir() and inside.is_relative_to(folder):
            raise JumpLoRAError(f"--out {args.out} lies inside the run directory {folder}: pass a directory outside "
                                "it")
    ownership.check_target(args.out, ownership.REPORT, "--out", args.overwrite)
    _, text = write_report(args.sources, args.out, args.tracking_uri, args.overwrite)
    print(text, end="")  # a comparison left out is said in it, with why (`report.runs.comparison_notes`)
    print(f"report: {args.out / REPORT_MD}, {args.out / REPORT_HTML}")
    return 0


def add_data_parser(sub) -> None:
    data_sub = sub.add_parser("data", help="data tools").add_subparsers(dest="data_command", required=True,
                                                                       parser_class=options.Parser, metavar="COMMAND")
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


def build_parser() -> argparse.ArgumentParser:
    parser = options.Parser(prog="jumplora",
                            description="JumpLoRA continual learning of T5 and decoder-only language models.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=options.Parser, metavar="COMMAND")
    add_run_parser(sub)
    p = sub.add_parser("orders", help="list the task orders")
    p.add_argument("--data-dir", default=None, type=PathKind(FOLDER),
                   help="CL_Benchmark directory whose tasks.json to read (default: paper)")
    add_data_parser(sub)
    p = sub.add_parser("eval", help="test accuracy of a run's merged model, scored as its run scored it",
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
    add_quiet(p)
    tracking.add_tracking_uri(p, "MLflow store of a model URI")
    p = sub.add_parser("report", help="the paper's tables (mean ± std over seeds) from runs, as Markdown and HTML",
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
    tracking.add_tracking_uri(p, "MLflow store of the experiments")
    p = sub.add_parser("track", help="log finished runs and grids to MLflow afterwards (when the store was down)",
                       description="Log run directories and grid_lambda.py / train_sequence.py folders to MLflow as "
                                   "they would have logged themselves, under the same keys: what the store already "
                                   "holds is not logged twice, so running it again adds nothing. An unfinished run "
                                   "whose process is gone has its runs left RUNNING marked KILLED.")
    p.add_argument("sources", nargs="+", metavar="RUN_DIR_OR_GRID", type=Text(),
                   help="`jumplora run` directories, or grid / train_sequence.py folders (paths or URIs)")
    tracking.add_tracking_uri(p, "MLflow tracking URI")
    return parser


def add_quiet(parser: argparse.ArgumentParser) -> None:
    """`--quiet`, declared once for every command that has it (`quiet_libraries`)."""
    parser.add_argument("--quiet", action="store_true",
                        help="no progress bars or library messages: only jumplora's own warnings and its result")


# each command's function; the longer ones by reference, in modules of their own, imported when they run
COMMANDS = {"run": "jumplora.cli_run:run_command", "orders": orders_command, "data": data_command,
            "eval": "jumplora.cli_eval:eval_command", "report": report_command,
            "track": "jumplora.cli_track:track_command"}


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
    quiet = getattr(args, "quiet", False)
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, format="%(levelname)s %(message)s")
    if quiet:
        quiet_libraries()
    return resolve(COMMANDS[args.command])(args)


def quiet_libraries() -> None:
    """`--quiet`: stderr holds the product's own warnings and errors only. Hugging Face's progress bars ("Writing
    model shards") and messages are off (read when transformers loads, which it has not yet), MLflow's and its
    database's messages below ERROR and its Python warnings are dropped."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"mlflow(\..*)?")


if __name__ == "__main__":
    sys.exit(main())

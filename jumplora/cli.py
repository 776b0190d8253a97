"""`jumplora` command line: run, orders, data check / build, eval. Bad input → one line on stderr and exit code 2."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from jumplora import options, tracking
from jumplora.data import location
from jumplora.errors import JumpLoRAError

DEFAULT_RUNS_ROOT = Path("runs")
SAMPLING_OPTIONS = ("max_train_per_task", "max_eval_per_task", "strict", "seed")
RUN_OPTIONS = ("order", "method", "threshold", "ella_delta", "lambdas", "model", "data_dir", *SAMPLING_OPTIONS,
               "max_tasks", "batch_size", "micro_batches", "lr", "rank", "alpha", "bandwidth", "jump_start",
               "jump_final", "max_source_tokens", "eval_batch_size", "eval_mode", "device", "precision",
               "single_task_baselines", "authors_compat", "full_lr", "ewc_fisher_samples", "olora_lambda1",
               "olora_lambda2", "target_modules")


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
    options.add_config_options(p, RUN_OPTIONS)
    p.add_argument("--out", type=Path, default=None, help="run directory (default: runs/order<N>-<method>-seed<S>)")
    p.add_argument("--overwrite", action="store_true", help="replace a completed run in --out")
    p.add_argument("--save-model", type=Path, default=None,
                   help="also save the final merged model (Hugging Face format) to this directory")
    p.add_argument("--save-merged-model", action="store_true",
                   help="save the final merged model (Hugging Face format) to <out>/merged_model and log it to MLflow")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_RUNS_ROOT / "cache",
                   help="where the tiny preset and single-task baselines are cached")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    tracking.add_options(p)


def run_command(args) -> int:
    from jumplora.config import RunConfig, check_device
    from jumplora.continual import prepare, run_continual, single_task_accuracies, summarise
    from jumplora.outputs import RESULTS, format_summary, write_run

    config = RunConfig(**options.config_fields(args, RUN_OPTIONS)).with_data_located()
    check_device(config.device)
    out = args.out or DEFAULT_RUNS_ROOT / f"order{config.order}-{config.method}-seed{config.seed}"
    blocker = next((path for path in (out, *out.parents) if path.exists()), None)
    if blocker is not None and not blocker.is_dir():
        where = "is a file" if blocker == out else f"is inside the file {blocker}"
        raise JumpLoRAError(f"--out {out} {where}: pass a directory")
    if (out / RESULTS).exists() and not args.overwrite:
        raise JumpLoRAError(f"{out} already holds a completed run: pass --overwrite or another --out")
    restart = (out / RESULTS).exists()  # --overwrite: the run starts over, so do its MLflow runs
    (out / RESULTS).unlink(missing_ok=True)
    progress = not args.quiet
    ws = prepare(config, args.cache_dir, progress=progress)
    log = tracking.ContinualLogger(tracking.from_args(args), out.name, tracking.key_of(
        "jumplora run", str(out.resolve()), config.digest(exclude=("device",))))
    log.begin({**config.to_dict(), "lambdas": ws.lambdas}, list(ws.tasks), ws.benchmark.fingerprint, replace=restart)
    try:
        base_state = {k: v.detach().clone() for k, v in ws.model.state_dict().items()} \
            if config.single_task_baselines else None
        state = run_continual(ws, progress=progress, on_task=lambda ws, state, t: log.on_task(t, state.records[t]))
        a0 = single_task_accuracies(ws, base_state, args.cache_dir, progress) if base_state is not None else None
        results = summarise(ws, state, a0)
        for directory in (args.save_model, out / tracking.MERGED_MODEL_DIR if args.save_merged_model else None):
            if directory is not None:
                ws.model.save_pretrained(directory)
                ws.tokenizer.save_pretrained(directory)
        write_run(out, results, [record.update for record in state.records])
    except BaseException as error:
        log.fail("KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED")
        raise
    log.end(results, out)
    print(format_summary(results), end="")
    print(f"run directory: {out}")
    return 0


def orders_command(args) -> int:
    from jumplora.data import load_orders

    for order, tasks in load_orders(args.data_dir).items():
        print(f"{order}: {', '.join(tasks)}")
    return 0


def data_check_command(args) -> int:
    from jumplora.data import format_report, validate_cl_benchmark

    counter = None
    if args.tokenizer is not None:
        from transformers import AutoTokenizer

        from jumplora.data.encode import PromptEncoder

        encoder = PromptEncoder(AutoTokenizer.from_pretrained(args.tokenizer), args.max_source_tokens)
        counter = encoder.source_length
    reports = validate_cl_benchmark(args.dir, count_source_tokens=counter, max_source_tokens=args.max_source_tokens)
    print(format_report(reports))
    if counter is None:
        print("(source lengths not checked: pass --tokenizer NAME_OR_PATH to count tokens)")
    problems = sum(report.problems for report in reports)
    print(f"{len({r.task for r in reports})} tasks, {len(reports)} splits, {problems} examples dropped or relabelled")
    return 1 if problems and args.strict else 0


def data_build_command(args) -> int:
    from jumplora.data import builder

    out = args.out or location.DEFAULT_DATA_DIR
    tasks = [name.strip() for name in args.tasks.split(",") if name.strip()] if args.tasks else None
    print(f"building CL_Benchmark in {out} from the Hugging Face Hub", flush=True)
    written = builder.build_cl_benchmark(out, tasks=tasks)
    print(f"wrote {written}")
    return 0


def data_command(args) -> int:
    return {"check": data_check_command, "build": data_build_command}[args.data_command](args)


def eval_command(args) -> int:
    from jumplora.data import load_benchmark, order_tasks
    from jumplora.data.encode import PromptEncoder
    from jumplora.evaluation import accuracy
    from jumplora.models import is_causal, load_model

    data_dir = location.resolve_data_dir(args.data_dir, synthetic_default=True)
    benchmark = load_benchmark(data_dir, seed=args.seed, max_train_per_task=args.max_train_per_task,
                               max_eval_per_task=args.max_eval_per_task, strict=args.strict,
                               tasks=order_tasks(data_dir, args.order))
    if not Path(args.model_dir).is_dir():
        raise JumpLoRAError(f"model directory {args.model_dir} does not exist: pass a directory saved by --save-model")
    model, tokenizer = load_model(str(args.model_dir), cache_dir=Path(args.model_dir), progress=False)
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

    _, text = write_report(args.sources, args.out, args.tracking_uri)
    print(text, end="")
    print(f"report: {args.out / REPORT_MD}, {args.out / REPORT_HTML}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog="jumplora",
                                description="JumpLoRA continual learning of T5 and decoder-only language models.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineErrorParser)
    add_run_parser(sub)
    p = sub.add_parser("orders", help="list the task orders")
    p.add_argument("--data-dir", default=None, help="CL_Benchmark directory whose tasks.json to read (default: paper)")
    p = sub.add_parser("data", help="data tools")
    data_sub = p.add_subparsers(dest="data_command", required=True, parser_class=OneLineErrorParser)
    check = data_sub.add_parser("check", help="validate every task and split of a CL_Benchmark directory")
    check.add_argument("dir", help="CL_Benchmark directory")
    check.add_argument("--strict", action="store_true", help="exit 1 if any problem is found")
    check.add_argument("--tokenizer", default=None,
                       help="tokenizer (hub name or path) to count source tokens with (default: no length check)")
    options.add_config_option(check, "max_source_tokens", "report sources longer than this")
    build = data_sub.add_parser("build", help="download the paper's tasks from the Hugging Face Hub and write a "
                                "CL_Benchmark directory (needs the extra jumplora[build-data])")
    build.add_argument("--out", default=None, help="directory to write, which must not exist yet (default: "
                       f"{location.DEFAULT_DATA_DIR}, where runs of a real model look for the data)")
    build.add_argument("--tasks", default=None, help="comma-separated task names (default: all 15)")
    p = sub.add_parser("eval", help="accuracy of a saved merged model on an order's tasks",
                       formatter_class=DefaultsHelpFormatter)
    p.add_argument("model_dir", help="directory written by `jumplora run --save-model`")
    p.add_argument("--order", type=int, required=True, help="task order")
    options.add_config_option(p, "data_dir", default_text=location.SYNTHETIC)
    options.add_config_options(p, SAMPLING_OPTIONS)
    p.add_argument("--json", action="store_true", help="also print the accuracies as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p = sub.add_parser("report", help="the paper's tables (mean ± std over seeds) from runs, as Markdown and HTML",
                       formatter_class=DefaultsHelpFormatter,
                       description="The paper's tables (mean ± std over seeds) from runs, as Markdown and HTML. A "
                                   "damaged results.json found in a folder or an experiment is skipped with a "
                                   "warning naming it; one named directly (or a source with nothing usable) is an "
                                   "error.")
    p.add_argument("sources", nargs="+", metavar="RUN_DIR_OR_EXPERIMENT",
                   help="run directories (or folders holding them) or MLflow experiment names (jumplora-order1)")
    p.add_argument("--out", type=Path, default=DEFAULT_RUNS_ROOT / "report", help="where report.md/.html/.json go")
    p.add_argument("--tracking-uri", default=None,
                   help="MLflow store of the experiments (default: $MLFLOW_TRACKING_URI, else runs/mlflow.db)")
    return parser


COMMANDS = {"run": run_command, "orders": orders_command, "data": data_command, "eval": eval_command,
            "report": report_command}


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
    except KeyboardInterrupt:
        print("jumplora: interrupted; no results.json was written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

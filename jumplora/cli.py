"""`jumplora` command line: run, orders, data check, eval. Bad input → one line on stderr and exit code 2."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from jumplora import tracking
from jumplora.errors import JumpLoRAError
from jumplora.methods import ELLA_DELTA_MODES, METHODS

DEFAULT_RUNS_ROOT = Path("runs")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number ≥ 1, got {value}")
    return value


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


def add_data_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default=None,
                        help="CL_Benchmark directory (with tasks.json) (default: the built-in synthetic benchmark)")
    parser.add_argument("--max-train-per-task", type=positive_int, default=None,
                        help="cap on training examples per task, class-stratified (default: all)")
    parser.add_argument("--max-eval-per-task", type=positive_int, default=None,
                        help="cap on dev and on test examples per task, class-stratified (default: all)")
    parser.add_argument("--strict", action="store_true",
                        help="stop on any data problem instead of dropping unusable examples (default: drop + warn)")
    parser.add_argument("--seed", type=int, default=42, help="seed for sampling, shuffling and init (default: 42)")


def add_run_parser(sub) -> None:
    p = sub.add_parser("run", help="train one continual sequence and write a run directory",
                       formatter_class=DefaultsHelpFormatter)
    p.add_argument("--order", type=int, default=1, help="task order (see `jumplora orders`)")
    p.add_argument("--method", default="jumplora+ella", choices=list(METHODS), help="continual method")
    p.add_argument("--threshold", default="global", choices=["global", "per_block"],
                   help="JumpLoRA threshold groups: one τ for the model, or one per transformer block")
    p.add_argument("--ella-delta", default="sparse", choices=list(ELLA_DELTA_MODES),
                   help="ΔW in JumpLoRA+ELLA's penalty: hard-masked after S_start, or interpolated with γ")
    p.add_argument("--lambdas", default="paper", help="ELLA λ per task: 'paper' (SPEC §5) or v1,v2,... (one per task)")
    p.add_argument("--model", default="tiny", help="'tiny' (offline preset), a hub name or a local path")
    add_data_options(p)
    p.add_argument("--batch-size", type=positive_int, default=32, help="global batch size")
    p.add_argument("--micro-batches", type=positive_int, default=1,
                   help="gradient accumulation: run each global batch in this many passes (less memory, same update)")
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (A, B and log τ)")
    p.add_argument("--rank", type=positive_int, default=8, help="adapter rank r")
    p.add_argument("--alpha", type=float, default=32.0, help="adapter alpha (scaling β = alpha / r)")
    p.add_argument("--bandwidth", type=float, default=1e-3, help="JumpReLU kernel bandwidth ε")
    p.add_argument("--jump-start", type=float, default=0.2, help="f_start: dense training until this epoch fraction")
    p.add_argument("--jump-final", type=float, default=0.8, help="f_final: γ reaches 1 at this epoch fraction")
    p.add_argument("--max-source-tokens", type=positive_int, default=512, help="input length; only text is cut")
    p.add_argument("--eval-batch-size", type=positive_int, default=64, help="evaluation batch size")
    p.add_argument("--eval-mode", default="fast", choices=["fast", "generate"],
                   help="fast: one teacher-forced pass, generate only where undecided (same accuracy); generate")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                   help="fp32, or bf16 autocast of the training forward (CUDA only; ΔW, masks and τ stay fp32)")
    p.add_argument("--single-task-baselines", action="store_true",
                   help="also train each task alone (cached) to get a0 and FWT")
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
    from jumplora.config import RunConfig, parse_lambdas
    from jumplora.continual import prepare, run_continual, single_task_accuracies, summarise
    from jumplora.outputs import RESULTS, format_summary, write_run

    config = RunConfig(order=args.order, method=args.method, threshold=args.threshold, ella_delta=args.ella_delta,
                       lambdas=parse_lambdas(args.lambdas), model=args.model, data_dir=args.data_dir,
                       seed=args.seed, max_train_per_task=args.max_train_per_task,
                       max_eval_per_task=args.max_eval_per_task, strict=args.strict, batch_size=args.batch_size,
                       micro_batches=args.micro_batches,
                       lr=args.lr, rank=args.rank, alpha=args.alpha, bandwidth=args.bandwidth,
                       jump_start=args.jump_start, jump_final=args.jump_final,
                       max_source_tokens=args.max_source_tokens, eval_batch_size=args.eval_batch_size,
                       eval_mode=args.eval_mode,
                       device=args.device, precision=args.precision, single_task_baselines=args.single_task_baselines)
    out = args.out or DEFAULT_RUNS_ROOT / f"order{config.order}-{config.method}-seed{config.seed}"
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
        state = run_continual(ws, progress=progress,
                              on_task=lambda ws, state, t: log.on_task(tracking.task_from_state(ws, state, t)))
        a0 = single_task_accuracies(ws, base_state, args.cache_dir, progress) if base_state is not None else None
        results = summarise(ws, state, a0)
        for directory in (args.save_model, out / tracking.MERGED_MODEL_DIR if args.save_merged_model else None):
            if directory is not None:
                ws.model.save_pretrained(directory)
                ws.tokenizer.save_pretrained(directory)
        write_run(out, results, state.task_updates)
        tracking.finish_run_dir(out, results)
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


def eval_command(args) -> int:
    from jumplora.data import load_benchmark, order_tasks
    from jumplora.data.encode import PromptEncoder
    from jumplora.evaluation import accuracy
    from jumplora.models import load_model

    benchmark = load_benchmark(args.data_dir, seed=args.seed, max_train_per_task=args.max_train_per_task,
                               max_eval_per_task=args.max_eval_per_task, strict=args.strict,
                               tasks=order_tasks(args.data_dir, args.order))
    if not Path(args.model_dir).is_dir():
        raise JumpLoRAError(f"model directory {args.model_dir} does not exist: pass a directory saved by --save-model")
    model, tokenizer = load_model(str(args.model_dir), texts=None, cache_dir=Path(args.model_dir), progress=False)
    encoder = PromptEncoder(tokenizer)
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
    parser = OneLineErrorParser(prog="jumplora", description="JumpLoRA continual learning of T5 models.")
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
    check.add_argument("--max-source-tokens", type=positive_int, default=512,
                       help="report sources longer than this (default: 512)")
    p = sub.add_parser("eval", help="accuracy of a saved merged model on an order's tasks",
                       formatter_class=DefaultsHelpFormatter)
    p.add_argument("model_dir", help="directory written by `jumplora run --save-model`")
    p.add_argument("--order", type=int, required=True, help="task order")
    add_data_options(p)
    p.add_argument("--json", action="store_true", help="also print the accuracies as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p = sub.add_parser("report", help="the paper's tables (mean ± std over seeds) from runs, as Markdown and HTML",
                       formatter_class=DefaultsHelpFormatter)
    p.add_argument("sources", nargs="+", metavar="RUN_DIR_OR_EXPERIMENT",
                   help="run directories (or folders holding them) or MLflow experiment names (jumplora-order1)")
    p.add_argument("--out", type=Path, default=DEFAULT_RUNS_ROOT / "report", help="where report.md/.html/.json go")
    p.add_argument("--tracking-uri", default=None,
                   help="MLflow store of the experiments (default: $MLFLOW_TRACKING_URI, else runs/mlflow.db)")
    return parser


COMMANDS = {"run": run_command, "orders": orders_command, "data": data_check_command, "eval": eval_command,
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

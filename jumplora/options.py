"""Command-line options of `RunConfig` fields, shared by `jumplora run` / `jumplora eval` and the Ray scripts: each
option's name, parsing, choices and help are written here once, and its default is the field's default in `RunConfig`,
stated in the help. With `preset=True` (the Ray scripts) the default is None instead: the option is left out and the
preset's value is kept, else the field's default (`ray_jobs.cli.run_config`); the help says so."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from jumplora.config import ELLA_DELTA_MODES, EVAL_MODES, PRECISIONS, THRESHOLD_GROUPINGS, RunConfig, parse_lambdas
from jumplora.data.location import DATA_DIR_ENV, DEFAULT_DATA_DIR, SYNTHETIC
from jumplora.methods import METHODS
from jumplora.models import CAUSAL, DEFAULT_TARGET_MODULES, SEQ2SEQ

DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunConfig)}


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number ≥ 1, got {value}")
    return value


def parse_names(text: str) -> tuple[str, ...]:
    """`q,v` → ("q", "v"); RunConfig refuses an empty list."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


@dataclass(frozen=True)
class Option:
    """The option `--field-name` of a RunConfig field: its help (without the default), how argparse parses the text
    (`type`, `choices`; a bool field is a flag), how the default reads in the help where its value says it badly
    (None: "all"), and how a parsed value becomes the field's (`convert`, which may raise JumpLoRAError)."""

    help: str
    type: Callable[[str], object] | None = None
    choices: tuple[str, ...] | None = None
    default_text: str | None = None
    convert: Callable[[object], object] | None = None


OPTIONS: dict[str, Option] = {
    "order": Option("task order (see `jumplora orders`)", int),
    "method": Option("continual method", choices=tuple(METHODS)),
    "threshold": Option("JumpLoRA threshold groups: one τ for the model, or one per transformer block",
                        choices=THRESHOLD_GROUPINGS),
    "ella_delta": Option("ΔW in JumpLoRA+ELLA's penalty: hard-masked after S_start, or interpolated with γ",
                         choices=ELLA_DELTA_MODES),
    "lambdas": Option("λ per task of ELLA / EWC: 'paper' (SPEC §5; EWC: search_spaces/lambdas.yaml) or v1,v2,... "
                      "(one per task)", convert=parse_lambdas),
    "model": Option("'tiny' or 'tiny-causal' (offline presets), a hub name or a local path of a seq2seq (T5) or "
                    "decoder-only causal LM"),
    "target_modules": Option("the linear layers to adapt, by name, comma-separated", convert=parse_names,
                             default_text=f"the model family's: {','.join(DEFAULT_TARGET_MODULES[SEQ2SEQ])} for T5, "
                             f"{','.join(DEFAULT_TARGET_MODULES[CAUSAL])} for a causal LM"),
    "model_dropout": Option("dropout of the base model (0 turns it off)", float, default_text="the checkpoint's"),
    "data_dir": Option(f"CL_Benchmark directory (with tasks.json), or '{SYNTHETIC}' for the built-in synthetic "
                       "benchmark", default_text=f"{SYNTHETIC} for the tiny model; any other model: ${DATA_DIR_ENV}, "
                       f"else {DEFAULT_DATA_DIR} as `jumplora data build` writes it, else an error"),
    "max_train_per_task": Option("cap on training examples per task, class-stratified", positive_int,
                                 default_text="all"),
    "max_eval_per_task": Option("cap on dev and on test examples per task, class-stratified", positive_int,
                                default_text="all"),
    "max_tasks": Option("stop after the first N tasks of the order", positive_int, default_text="all"),
    "strict": Option("stop on any data problem instead of dropping unusable examples", default_text="drop + warn"),
    "seed": Option("seed for sampling, shuffling and init", int),
    "batch_size": Option("global batch size", positive_int),
    "micro_batches": Option("gradient accumulation: each worker runs its share of a global batch in this many passes "
                            "(less memory, same update)", positive_int),
    "lr": Option("AdamW learning rate (A, B and log τ)", float),
    "full_lr": Option("AdamW learning rate when every weight trains (ewc, seqft)", float),
    "ewc_fisher_samples": Option("EWC: training examples per task (a seeded sample) for the diagonal Fisher",
                                 positive_int),
    "olora_lambda1": Option("O-LoRA: weight of Σ|A_past A_tᵀ| (orthogonality to the past tasks' lora_A)", float),
    "olora_lambda2": Option("O-LoRA: weight of ‖A_t‖ + ‖B_t‖", float),
    "rank": Option("adapter rank r", positive_int),
    "alpha": Option("adapter alpha (scaling β = alpha / r)", float),
    "bandwidth": Option("JumpReLU kernel bandwidth ε", float),
    "jump_start": Option("f_start: dense training until this epoch fraction", float),
    "jump_final": Option("f_final: γ reaches 1 at this epoch fraction", float),
    "authors_compat": Option("JumpLoRA as the authors' code runs it, not SPEC: γ lags one step (γ(s − 1)), the sparse "
                             "ELLA mask starts at S_start + 2, and the global τ by count keeps n − 1 entries",
                             default_text="off, SPEC's schedule and count"),
    "max_source_tokens": Option("input length; only text is cut", positive_int),
    "eval_batch_size": Option("evaluation batch size", positive_int),
    "eval_mode": Option("fast: one teacher-forced pass, generate only where undecided (same accuracy); generate",
                        choices=EVAL_MODES),
    "device": Option("auto, cpu, cuda or cuda:N"),
    "precision": Option("fp32, or bf16 autocast of the training forward (CUDA only; ΔW, masks and τ stay fp32)",
                        choices=PRECISIONS),
    "single_task_baselines": Option("also train each task alone (cached) to get a0 and FWT"),
}


def add_config_option(parser: argparse.ArgumentParser, name: str, help_text: str | None = None,
                      preset: bool = False, default_text: str | None = None) -> None:
    """`--name` of the RunConfig field `name` (`help_text` and `default_text` replace the option's own); see the
    module's docstring."""
    option, default = OPTIONS[name], DEFAULTS[name]
    stated = default_text or option.default_text or str(default)
    flag = isinstance(default, bool)
    parsing = {"action": "store_true"} if flag else {"type": option.type, "choices": option.choices}
    if preset:
        default, stated = None, f"the preset's, else {stated}"
    parser.add_argument(f"--{name.replace('_', '-')}", default=default,
                        help=f"{help_text or option.help} (default: {stated})", **parsing)


def add_config_options(parser: argparse.ArgumentParser, names: Iterable[str], preset: bool = False) -> None:
    for name in names:
        add_config_option(parser, name, preset=preset)


def config_fields(args: argparse.Namespace, names: Iterable[str]) -> dict:
    """The named fields' values parsed into `args`, converted; an option at None (not given) is left out, so that
    `RunConfig` (or the preset) supplies it."""
    fields = {}
    for name in names:
        value = getattr(args, name)
        if value is not None:
            fields[name] = OPTIONS[name].convert(value) if OPTIONS[name].convert else value
    return fields

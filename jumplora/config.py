"""One run's configuration (SPEC §3 defaults) and its validation. A leaf: it imports nothing else of the package, so
every module may import it (the method registry checks a configuration against the methods: `methods.check`)."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from jumplora.errors import JumpLoRAError

# the choices of the fields that take one of a few values
THRESHOLD_GROUPINGS = ("global", "per_block")  # one τ for the model, or one per transformer block
ELLA_DELTA_MODES = ("sparse", "interpolated")  # ΔW in JumpLoRA+ELLA's penalty: hard-masked, or interpolated with γ
EVAL_MODES = ("fast", "generate")  # `evaluation.accuracy`: teacher-forced where decided, or always generate
PRECISIONS = ("fp32", "bf16")
LAMBDA_TABLES = ("paper", "paper-grid")  # the λ tables of search_spaces/lambdas.yaml (`spaces.paper_lambdas`)
# the commands whose options are RunConfig fields (`option(commands=…)`): `jumplora run`, `jumplora eval`, `jumplora
# data check`, and the Ray scripts grid_lambda.py, train_sequence.py and reproduce.py
COMMANDS = ("run", "eval", "data-check", "grid", "sequence", "reproduce")
# the float fields, each refused unless finite
NUMBERS = ("lr", "weight_decay", "grad_clip", "alpha", "bandwidth", "jump_start", "jump_final", "model_dropout",
           "lora_dropout", "jump_dropout", "full_lr", "olora_lambda1", "olora_lambda2")


def check_precision(precision: str, device: torch.device | str) -> None:
    """bf16 autocast is used on CUDA only: refuse it elsewhere with one clear line."""
    if precision == "bf16" and torch.device(device).type != "cuda":
        raise JumpLoRAError(f"--precision bf16 needs a CUDA device (this run is on {device}): use --precision fp32")


def is_finite(value) -> bool:
    """A number (not a string, not a bool) that is neither NaN nor infinite."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_device(device: str) -> None:
    """A CUDA device must exist on this machine: refuse `cuda` / `cuda:N` without it with one clear line (`auto`
    and `cpu` always pass). Called where the run starts, not by RunConfig: a Ray driver without a GPU builds the
    configurations that its workers run on theirs."""
    if device == "auto" or torch.device(device).type != "cuda":
        return
    if not torch.cuda.is_available():
        raise JumpLoRAError(f"--device {device}: this machine has no CUDA device: use --device cpu or auto")
    index = torch.device(device).index
    if index is not None and index >= torch.cuda.device_count():
        raise JumpLoRAError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                            f"numbered from 0: use --device cuda or auto")


def check_no_empty_field(text: str, option: str) -> None:
    """A comma-separated list must not hold an empty field ("0,,1e3"): dropping it would shift every later value."""
    fields = text.split(",")
    empty = [position for position, field in enumerate(fields, start=1) if not field.strip()]
    if empty and text.strip():
        raise JumpLoRAError(f"{option} {text!r} has an empty value at position {empty[0]} of {len(fields)}: give one "
                            "value per comma-separated field")


def positive_int(text: str) -> int:
    """The `type` of an option taking a whole number ≥ 1 (argparse reports the error with the option's name)."""
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


def parse_numbers(text: str, option: str, expected: str = "numbers like 0,1e3,1e5") -> list[float]:
    """A comma-separated list of finite non-negative numbers (`--lambdas`, `grid_lambda.py --grid`)."""
    check_no_empty_field(text, option)
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise JumpLoRAError(f"{option} must be {expected}; got {text!r}") from None
    if any(v < 0 or not math.isfinite(v) for v in values):
        raise JumpLoRAError(f"{option} needs finite non-negative numbers, got {text!r}")
    return values


def parse_lambdas(text: str) -> list[float] | str:
    """`--lambdas`: a λ table's name (`LAMBDA_TABLES`) or one number per task; `jumplora.lambdas` resolves it."""
    if text.strip() in LAMBDA_TABLES:
        return text.strip()
    return parse_numbers(text, "--lambdas", f"{' or '.join(LAMBDA_TABLES)} or numbers like 0,1e3,1e5")


def option(default: Any, help: str, *, commands: tuple[str, ...] = (), choices: tuple[str, ...] | None = None,
           type: Callable[[str], Any] | None = None, convert: Callable[[Any], Any] | None = None,
           default_text: str | None = None) -> Any:
    """A RunConfig field (a `dataclasses.Field`) with the facts of its command-line option `--field-name` in its
    metadata, from which `jumplora.options` builds each command's options: `help` (without the default), the
    `commands` that show it (of `COMMANDS`), argparse's `choices` and `type` (a bool field is a flag), `convert` from
    the parsed value to the field's (may raise JumpLoRAError), and `default_text`, how the default reads in the help
    where its value says it badly (None: "all"). Help texts may name `{…}` values of `options.TEXT_VALUES` (facts
    whose home is another module, such as the model families' target modules)."""
    unknown = set(commands) - set(COMMANDS)
    if unknown:
        raise ValueError(f"option {help!r}: unknown commands {sorted(unknown)}; known: {COMMANDS}")
    facts = {"help": help, "commands": commands, "choices": choices, "type": type, "convert": convert,
             "default_text": default_text}
    return dataclasses.field(default=default, metadata=facts)


# the commands showing the fields of a run's method and training, and those showing the fields of its data and model
# (reproduce.py takes each method's settings from search_spaces/methods.yaml)
METHOD = ("run", "grid", "sequence")
DATA = ("run", "grid", "sequence", "reproduce")


@dataclass
class RunConfig:
    """Everything that decides a continual run's numbers. The defaults follow SPEC §3. Each field carries its
    command-line option (`option`): its default is the option's, and `jumplora.options` builds the options of
    `jumplora run` / `eval` / `data check` and of the Ray scripts from the fields, so adding an option is adding a
    field here."""

    order: int = option(1, "task order (see `jumplora orders`)", commands=("run", "sequence"), type=int)
    method: str = option("jumplora+ella", "continual method", commands=METHOD)
    threshold: str = option("global", "JumpLoRA threshold groups: one τ for the model, or one per transformer block",
                            commands=METHOD, choices=THRESHOLD_GROUPINGS)
    ella_delta: str = option("sparse", "ΔW in JumpLoRA+ELLA's penalty: hard-masked after S_start, or interpolated "
                             "with γ", commands=METHOD, choices=ELLA_DELTA_MODES)
    lambdas: str | list[float] = option(
        "paper", "λ per task of ELLA / EWC: 'paper' (SPEC §5; EWC: search_spaces/lambdas.yaml), 'paper-grid' (the "
        "paper's grid results, search_spaces/lambdas.yaml) or v1,v2,... (one per task)", commands=("run", "sequence"),
        convert=parse_lambdas)
    model: str = option("tiny", "'tiny' or 'tiny-causal' (offline presets), a hub name or a local path of a seq2seq "
                        "(T5) or decoder-only causal LM", commands=DATA)
    # None keeps the checkpoint's dropout_rate (`load_model`)
    model_dropout: float | None = option(None, "dropout of the base model (0 turns it off)", commands=DATA,
                                         type=float, default_text="the checkpoint's")
    data_dir: str | None = option(
        None, "CL_Benchmark directory (with tasks.json), or '{synthetic}' for the built-in synthetic benchmark",
        commands=(*DATA, "eval"), default_text="{synthetic} for the tiny model; any other model: ${data_dir_env}, "
        "else {default_data_dir} as `jumplora data build` writes it, else an error")
    seed: int = option(42, "seed for sampling, shuffling and init", commands=(*METHOD, "eval"), type=int)
    max_train_per_task: int | None = option(None, "cap on training examples per task, class-stratified",
                                            commands=(*DATA, "eval"), type=positive_int, default_text="all")
    max_eval_per_task: int | None = option(None, "cap on dev and on test examples per task, class-stratified",
                                           commands=(*DATA, "eval"), type=positive_int, default_text="all")
    max_tasks: int | None = option(None, "stop after the first N tasks of the order", commands=DATA, type=positive_int,
                                   default_text="all")
    strict: bool = option(False, "stop on any data problem instead of dropping unusable examples",
                          commands=("run", "eval"), default_text="drop + warn")
    batch_size: int = option(32, "global batch size", commands=("run",), type=positive_int)
    micro_batches: int = option(1, "gradient accumulation: each worker runs its share of a global batch in this many "
                                "passes (less memory, same update)", commands=DATA, type=positive_int)
    lr: float = option(1e-3, "AdamW learning rate (A, B and log τ)", commands=("run",), type=float)
    # O-LoRA's full fine-tuning rate (DECISIONS "Full-lr")
    full_lr: float = option(1e-4, "AdamW learning rate when every weight trains (ewc, seqft)", commands=METHOD,
                            type=float)
    weight_decay: float = option(0.0, "AdamW weight decay")
    grad_clip: float = option(1.0, "the gradients' global norm is clipped to this")
    rank: int = option(8, "adapter rank r", commands=("run",), type=positive_int)
    alpha: float = option(32.0, "adapter alpha (scaling β = alpha / r)", commands=("run",), type=float)
    target_modules: tuple[str, ...] | None = option(
        None, "the linear layers to adapt, by name, comma-separated", commands=DATA, convert=parse_names,
        default_text="the model family's: {t5_targets} for T5, {causal_targets} for a causal LM")
    lora_dropout: float = option(0.1, "dropout of a plain LoRA adapter's input")
    jump_dropout: float = option(0.0, "dropout of a JumpLoRA adapter's input")
    bandwidth: float = option(1e-3, "JumpReLU kernel bandwidth ε", commands=("run",), type=float)
    tau_reduction: str = option("mean", "JumpLoRA: ∂L/∂τ summed over a group's entries, or their mean")
    jump_start: float = option(0.2, "f_start: dense training until this epoch fraction", commands=("run",), type=float)
    jump_final: float = option(0.8, "f_final: γ reaches 1 at this epoch fraction", commands=("run",), type=float)
    # JumpLoRA as the authors' code runs it (γ lag, mask start, count; JumpLoraConfig)
    authors_compat: bool = option(
        False, "JumpLoRA as the authors' code runs it, not SPEC: γ lags one step (γ(s − 1)), the sparse ELLA mask "
        "starts at S_start + 2, and the global τ by count keeps n − 1 entries", commands=METHOD,
        default_text="off, SPEC's schedule and count")
    max_source_tokens: int = option(512, "input length; only text is cut", commands=("run", "data-check"),
                                    type=positive_int)
    max_target_tokens: int = option(8, "label length in tokens")
    eval_batch_size: int = option(64, "evaluation batch size", commands=("run",), type=positive_int)
    eval_mode: str = option("fast", "fast: one teacher-forced pass, generate only where undecided (same accuracy); "
                            "generate", commands=("run",), choices=EVAL_MODES)
    device: str = option("auto", "auto, cpu, cuda or cuda:N", commands=("run",))
    # "bf16": bf16 autocast of the forward on CUDA only (ΔW, masks, τ stay fp32)
    precision: str = option("fp32", "fp32, or bf16 autocast of the training forward (CUDA only; ΔW, masks and τ stay "
                            "fp32)", commands=("run",), choices=PRECISIONS)
    single_task_baselines: bool = option(False, "also train each task alone (cached) to get a0 and FWT",
                                         commands=("run",))
    ewc_fisher_samples: int = option(256, "EWC: training examples per task (a seeded sample) for the diagonal Fisher",
                                     commands=METHOD, type=positive_int)
    # O-LoRA's weights: O-LoRA's defaults
    olora_lambda1: float = option(0.5, "O-LoRA: weight of Σ|A_past A_tᵀ| (orthogonality to the past tasks' lora_A)",
                                  commands=METHOD, type=float)
    olora_lambda2: float = option(0.0, "O-LoRA: weight of ‖A_t‖ + ‖B_t‖", commands=METHOD, type=float)

    def __post_init__(self) -> None:
        if self.target_modules is not None:
            self.target_modules = tuple(self.target_modules)
            if not self.target_modules or not all(isinstance(m, str) and m.strip() for m in self.target_modules):
                raise JumpLoRAError(f"--target-modules needs linear-layer names such as q,v or q_proj,v_proj; got "
                                    f"{list(self.target_modules)}")
        for name in NUMBERS:
            if getattr(self, name) is not None and not is_finite(getattr(self, name)):
                raise JumpLoRAError(f"--{name.replace('_', '-')} must be a finite number, got {getattr(self, name)!r}")
        if self.model_dropout is not None and not 0 <= self.model_dropout < 1:
            raise JumpLoRAError(f"--model-dropout must be a probability in [0, 1), got {self.model_dropout}")
        if self.lambdas not in LAMBDA_TABLES and not all(is_finite(v) for v in self.lambdas):
            raise JumpLoRAError(f"--lambdas must be finite numbers, got {list(self.lambdas)}")
        if self.ella_delta not in ELLA_DELTA_MODES:
            raise JumpLoRAError(f"--ella-delta must be one of {', '.join(ELLA_DELTA_MODES)}, got {self.ella_delta!r}")
        for name in ("batch_size", "eval_batch_size", "max_source_tokens", "max_target_tokens"):
            if getattr(self, name) < 1:
                raise JumpLoRAError(f"{name} must be ≥ 1, got {getattr(self, name)}")
        if not 1 <= self.micro_batches <= self.batch_size:
            raise JumpLoRAError(f"--micro-batches must be between 1 and the batch size {self.batch_size}, "
                                f"got {self.micro_batches}")
        for name in ("max_train_per_task", "max_eval_per_task", "max_tasks"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise JumpLoRAError(f"--{name.replace('_', '-')} must be ≥ 1, got {getattr(self, name)}")
        if self.lr <= 0 or self.grad_clip <= 0:
            raise JumpLoRAError(f"lr and grad_clip must be positive, got lr={self.lr}, grad_clip={self.grad_clip}")
        if self.full_lr is None or self.full_lr <= 0:  # None: a configuration saved when it fell back to lr
            raise JumpLoRAError(f"--full-lr must be a positive number, got {self.full_lr}")
        if self.ewc_fisher_samples < 1:
            raise JumpLoRAError(f"--ewc-fisher-samples must be ≥ 1, got {self.ewc_fisher_samples}")
        if self.olora_lambda1 < 0 or self.olora_lambda2 < 0:
            raise JumpLoRAError(f"--olora-lambda1/2 must be ≥ 0, got {self.olora_lambda1}, {self.olora_lambda2}")
        if self.precision not in PRECISIONS:
            raise JumpLoRAError(f"--precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.device != "auto":  # "auto" is resolved (and checked again) when training starts
            try:
                torch.device(self.device)
            except RuntimeError:
                raise JumpLoRAError(f"--device must be auto, cpu, cuda or cuda:N, got {self.device!r}") from None
            check_precision(self.precision, self.device)
        if self.eval_mode not in EVAL_MODES:
            raise JumpLoRAError(f"--eval-mode must be one of {', '.join(EVAL_MODES)}, got {self.eval_mode!r}")

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["target_modules"] = None if self.target_modules is None else list(self.target_modules)
        return data

    def digest(self, exclude: tuple[str, ...] = ()) -> str:
        """A stable hash of the resolved config, without the named fields."""
        return digest_of(self.to_dict(), exclude)


def digest_of(config: dict, exclude: tuple[str, ...] = ()) -> str:
    """`RunConfig.digest` of a config as `to_dict` gave it (a results.json's), whatever fields RunConfig has now."""
    data = {k: v for k, v in config.items() if k not in exclude}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

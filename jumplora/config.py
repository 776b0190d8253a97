"""One run's configuration (SPEC §3 defaults) and its validation. A leaf: it imports nothing else of the package, so
every module may import it (the method registry checks a configuration against the methods: `methods.check`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass

import torch

from jumplora.errors import JumpLoRAError

PRECISIONS = ("fp32", "bf16")
THRESHOLD_GROUPINGS = ("global", "per_block")  # one τ for the model, or one per transformer block
ELLA_DELTA_MODES = ("sparse", "interpolated")  # ΔW_eff in ELLA's penalty on a JumpLoRA adapter
EVAL_MODES = ("fast", "generate")  # `jumplora.evaluation`
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


def parse_lambdas(text: str) -> list[float] | str:
    """`paper` or a comma-separated list of finite non-negative numbers."""
    if text.strip() == "paper":
        return "paper"
    check_no_empty_field(text, "--lambdas")
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise JumpLoRAError(f"--lambdas must be 'paper' or numbers like 0,1e3,1e5; got {text!r}") from None
    if not values or any(v < 0 or not math.isfinite(v) for v in values):
        raise JumpLoRAError(f"--lambdas needs finite non-negative numbers, got {text!r}")
    return values


@dataclass
class RunConfig:
    """Everything that decides a continual run's numbers. The defaults follow SPEC §3; they are the command lines'
    defaults too (`jumplora.options`)."""

    order: int = 1
    method: str = "jumplora+ella"
    threshold: str = "global"
    ella_delta: str = "sparse"
    lambdas: str | list[float] = "paper"
    model: str = "tiny"  # the offline preset (`jumplora.tiny.TINY`)
    model_dropout: float | None = None  # None keeps the checkpoint's dropout_rate (`load_model`)
    data_dir: str | None = None
    seed: int = 42
    max_train_per_task: int | None = None
    max_eval_per_task: int | None = None
    max_tasks: int | None = None  # stop after the first N tasks of the order
    strict: bool = False
    batch_size: int = 32
    micro_batches: int = 1  # gradient accumulation: each worker's share of a global batch in this many passes
    lr: float = 1e-3
    full_lr: float = 1e-4  # EWC / SeqFT (every weight trains): O-LoRA's full fine-tuning rate (DECISIONS "Full-lr")
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    rank: int = 8
    alpha: float = 32.0
    target_modules: tuple[str, ...] | None = None  # None: the model family's (`models.DEFAULT_TARGET_MODULES`)
    lora_dropout: float = 0.1
    jump_dropout: float = 0.0
    bandwidth: float = 1e-3
    tau_reduction: str = "mean"
    jump_start: float = 0.2
    jump_final: float = 0.8
    authors_compat: bool = False  # JumpLoRA as the authors' code runs it (γ lag, mask start, count; JumpLoraConfig)
    max_source_tokens: int = 512
    max_target_tokens: int = 8
    eval_batch_size: int = 64
    eval_mode: str = "fast"  # "fast" (teacher-forced, generate only where undecided) or "generate"; same accuracy
    device: str = "auto"
    precision: str = "fp32"  # "bf16": bf16 autocast of the forward on CUDA only (ΔW, masks, τ stay fp32)
    single_task_baselines: bool = False
    ewc_fisher_samples: int = 256  # training examples per task for EWC's Fisher (a seeded sample)
    olora_lambda1: float = 0.5  # O-LoRA's orthogonality weight (O-LoRA's default)
    olora_lambda2: float = 0.0  # O-LoRA's weight on ‖A_t‖ + ‖B_t‖ (O-LoRA's default)

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
        if self.lambdas != "paper" and not all(is_finite(v) for v in self.lambdas):
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

    def resolve_lambdas(self, n_tasks: int) -> list[float]:
        """λ per task: zeros for methods without a per-task λ; the paper's table (search_spaces/lambdas.yaml `default`,
        EWC's `ewc`); or the user's list (checked)."""
        from jumplora.methods import get_method

        if not get_method(self.method).per_task_lambda:
            return [0.0] * n_tasks
        if self.lambdas == "paper":
            from jumplora import spaces  # here, not at the top: spaces validates the files with RunConfig

            values = spaces.paper_lambdas("paper", self)
            if len(values) != n_tasks:
                raise JumpLoRAError(f"the paper's λ table for order {self.order} has {len(values)} values but the "
                                    f"order has {n_tasks} tasks: pass --lambdas with {n_tasks} values")
            return values
        values = list(self.lambdas)
        if len(values) != n_tasks:
            raise JumpLoRAError(f"--lambdas has {len(values)} values but order {self.order} has {n_tasks} tasks")
        return values

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

"""One run's configuration (SPEC §3 defaults) and its validation: every setting declared once, as an `option` field
of RunConfig, of an adapter kind's config (held flat by RunConfig: `held`) or of a method's settings dataclass
(docs/ARCHITECTURE.md). A leaf without torch, where the method registry installs itself as the package loads."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jumplora.errors import JumpLoRAError
from jumplora.kinds import (
    FOLDER,
    NON_NEGATIVE,
    POSITIVE,
    POSITIVE_INT,
    PROBABILITY,
    SEED,
    Device,
    Items,
    Kind,
    Number,
    PathKind,
    Text,
)

# the choices of the fields that take one of a few values
THRESHOLD_GROUPINGS = ("global", "per_block")  # one τ for the model, or one per transformer block
EVAL_MODES = ("fast", "generate")  # `evaluation.exact_match_flags`: teacher-forced where decided, or always generate
PRECISIONS = ("fp32", "bf16")
TAU_REDUCTIONS = ("mean", "sum")  # ∂L/∂τ over a group's entries
LAMBDA_TABLES = ("paper", "paper-grid")  # the λ tables of search_spaces/lambdas.yaml (`spaces.paper_lambdas`)
# the commands whose options are RunConfig fields (`option(commands=…)`): `jumplora run`, `jumplora eval`, `jumplora
# data check`, and the Ray scripts grid_lambda.py, train_sequence.py and reproduce.py
COMMANDS = ("run", "eval", "data-check", "grid", "sequence", "reproduce")
SYNTHETIC = "synthetic"  # `--data-dir synthetic`: the built-in synthetic benchmark (`data.location`)
MODULE_NAMES = Items(Text(), result=tuple, example="q,v")
LAMBDA_VALUES = Items(NON_NEGATIVE, unique=False, words=LAMBDA_TABLES, example="0,1e3,1e5")
LAMBDA_GRID = Items(POSITIVE, example="1,1e3,1e5")  # the λ a grid stage tries (`--grid`, `MethodSpec.lambda_grid`)
# SPEC §1: the fewest optimizer steps of a task (dense up to S_start < S_final, then sparse), said in the help of the
# cap on training examples and in the refusal of a task with fewer (`training.check_enough_steps`)
MIN_STEPS = 3
STEPS_RULE = f"a task trains at least {MIN_STEPS} optimizer steps (SPEC §1)"


def check_precision(precision: str, device: object) -> None:
    """bf16 autocast is used on CUDA only, on a GPU that computes in bf16: refuse it elsewhere with one clear line.
    `device`: its name or a torch.device."""
    if precision != "bf16":
        return
    if str(device).split(":")[0] != "cuda":
        raise JumpLoRAError(f"--precision bf16 needs a CUDA device (this run is on {device}): use --precision fp32")
    import torch  # asked of a CUDA device only: the configuration imports no torch

    if torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
        raise JumpLoRAError(f"--precision bf16: the GPU of {device} does not compute in bf16: use --precision fp32")


def option(default: Any, help: str, *, commands: tuple[str, ...] = (), choices: tuple[str, ...] | None = None,
           kind: Kind | None = None, default_text: str | None = None) -> Any:
    """A setting's field, with the facts of its option `--field-name` (`jumplora.options`) in its metadata: `help`
    (without the default; it may name `{…}` values of `options.TEXT_VALUES`), the `commands` that show it, argparse's
    `choices` or the value's `kind` (`jumplora.kinds`: its argparse type and its check, `check_options`; a bool field
    is a flag), and `default_text`, how the default reads in the help where its value says it badly."""
    unknown = set(commands) - set(COMMANDS)
    if unknown:
        raise ValueError(f"option {help!r}: unknown commands {sorted(unknown)}; known: {COMMANDS}")
    if (kind is None) == (choices is None) and not isinstance(default, bool):
        raise ValueError(f"option {help!r}: give its kind or its choices")
    facts = {"help": help, "commands": commands, "choices": choices, "kind": kind, "default_text": default_text}
    return dataclasses.field(default=default, metadata=facts)


def held(settings: type, name: str) -> Any:
    """RunConfig's field of the adapter setting `name` of the config dataclass `settings`, as declared there: a run
    holds every adapter kind's settings flat (`config.rank`), as its results.json records them."""
    declared = settings.__dataclass_fields__[name]
    return dataclasses.field(default=declared.default, metadata=declared.metadata)


# the commands showing the fields of a run's method and training, those showing the fields of its data and model
# (reproduce.py takes each method's settings from search_spaces/methods.yaml), and those showing every method's own
# settings, whatever commands they name (reproduce.py gives one to the methods of its sweep that read it)
METHOD = ("run", "grid", "sequence")
DATA = ("run", "grid", "sequence", "reproduce")
OWN_SETTINGS = ("run", "grid", "sequence", "reproduce")


def settings(cls: type) -> type:
    """`cls` as a frozen dataclass of `option` fields whose values are checked as their options are
    (`check_options`) whenever one is built: a method's own settings (`MethodSpec.settings`), an adapter's config."""
    cls.__post_init__ = lambda self: check_options(self)
    return dataclass(frozen=True)(cls)


@settings
class LowRankConfig:
    """The settings of a LoRA-family adapter (SPEC §1): ΔW = B A of rank r, scaled by β = alpha / r, on the
    `target_modules` (not an option: the run's, else the model family's, `AdapterKind.configure`)."""

    target_modules: tuple[str, ...]
    rank: int = option(8, "adapter rank r", commands=("run",), kind=POSITIVE_INT)
    alpha: float = option(32.0, "adapter alpha (scaling β = alpha / r)", commands=("run",), kind=POSITIVE)

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank


@dataclass(frozen=True)
class LoraConfig(LowRankConfig):
    """A plain LoRA's settings (IncLoRA, ELLA)."""

    lora_dropout: float = option(0.1, "dropout of a plain LoRA adapter's input", kind=PROBABILITY)


@dataclass(frozen=True)
class JumpLoraConfig(LowRankConfig):
    """The JumpLoRA adapter's threshold and schedule (SPEC §1). `authors_compat` is the run's (not the adapter's
    option: the evaluation reads it too): γ lags one step, the mask starts at S_start + 2, the global τ keeps n − 1."""

    threshold: str = option("global", "JumpLoRA threshold groups: one τ for the model, or one per transformer block",
                            commands=METHOD, choices=THRESHOLD_GROUPINGS)
    bandwidth: float = option(1e-3, "JumpReLU kernel bandwidth ε", commands=("run",), kind=POSITIVE)
    tau_reduction: str = option("mean", "JumpLoRA: ∂L/∂τ summed over a group's entries, or their mean",
                                choices=TAU_REDUCTIONS)
    jump_start: float = option(0.2, "f_start: dense training until this epoch fraction", commands=("run",),
                               kind=Number(low=0, high=1, high_open=True))
    jump_final: float = option(0.8, "f_final: γ reaches 1 at this epoch fraction", commands=("run",),
                               kind=Number(low=0, high=1, low_open=True))
    jump_dropout: float = option(0.0, "dropout of a JumpLoRA adapter's input", kind=PROBABILITY)
    authors_compat: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.jump_start >= self.jump_final:
            raise JumpLoRAError(f"need 0 ≤ f_start < f_final ≤ 1, got f_start={self.jump_start}, f_final="
                                f"{self.jump_final}: pass e.g. --jump-start 0.2 --jump-final 0.8")


@settings
class FullConfig:
    """No adapter, every weight trains (EWC, SeqFT): its learning rate, and the `target_modules` whose change is
    recorded as the task's update (sparsity, overlap)."""

    target_modules: tuple[str, ...]
    # O-LoRA's full fine-tuning rate (DECISIONS "Full fine-tuning rate")
    full_lr: float = option(1e-4, "AdamW learning rate when every weight trains", commands=METHOD, kind=POSITIVE)


@dataclass
class RunConfig:
    """Everything that decides a continual run's numbers (defaults: SPEC §3). Each field carries its command-line
    option (`option`), so adding an option is adding a field here; an adapter kind's settings are declared in its
    config (`held`), and held here in the order that results.json records them."""

    order: int = option(1, "task order (see `jumplora orders`)", commands=("run", "sequence", "eval"),
                        kind=POSITIVE_INT)
    method: str = option("jumplora+ella", "continual method", commands=METHOD, kind=Text())
    threshold: str = held(JumpLoraConfig, "threshold")
    lambdas: str | list[float] = option(
        "paper", "λ per task of ELLA / EWC: 'paper' (SPEC §5; EWC: search_spaces/lambdas.yaml), 'paper-grid' (the "
        "paper's grid results, search_spaces/lambdas.yaml) or v1,v2,... (one per task)", commands=("run", "sequence"),
        kind=LAMBDA_VALUES)
    model: str = option("tiny", "'tiny' or 'tiny-causal' (offline presets), a hub name or a local path of a seq2seq "
                        "(T5) or decoder-only causal LM", commands=DATA, kind=Text())
    # None keeps the checkpoint's dropout_rate (`load_model`)
    model_dropout: float | None = option(None, "dropout of the base model (0 turns it off)", commands=DATA,
                                         kind=PROBABILITY, default_text="the checkpoint's")
    data_dir: str | None = option(
        None, "CL_Benchmark directory (with tasks.json), or '{synthetic}' for the built-in synthetic benchmark",
        commands=(*DATA, "eval"), kind=PathKind(FOLDER, words=(SYNTHETIC,)),
        default_text="{synthetic} for the tiny model; any other model: ${data_dir_env}, "
        "else {default_data_dir} as `jumplora data build` writes it, else an error")
    seed: int = option(42, "seed for sampling, shuffling and init", commands=(*METHOD, "eval"), kind=SEED)
    max_train_per_task: int | None = option(
        None, f"cap on training examples per task, class-stratified; {STEPS_RULE}, so more than {MIN_STEPS - 1} × "
        "--batch-size examples", commands=(*DATA, "eval"), kind=POSITIVE_INT, default_text="all")
    max_eval_per_task: int | None = option(None, "cap on dev and on test examples per task, class-stratified",
                                           commands=(*DATA, "eval"), kind=POSITIVE_INT, default_text="all")
    max_tasks: int | None = option(None, "stop after the first N tasks of the order", commands=(*DATA, "eval"),
                                   kind=POSITIVE_INT, default_text="all")
    strict: bool = option(False, "stop on any data problem instead of dropping unusable examples",
                          commands=("run", "eval"), default_text="drop + warn")
    batch_size: int = option(32, "global batch size", commands=("run",), kind=POSITIVE_INT)
    micro_batches: int = option(1, "gradient accumulation: each worker runs its share of a global batch in this many "
                                "passes (less memory, same update)", commands=DATA, kind=POSITIVE_INT)
    lr: float = option(1e-3, "AdamW learning rate (A, B and log τ)", commands=("run",), kind=POSITIVE)
    full_lr: float = held(FullConfig, "full_lr")
    weight_decay: float = option(0.0, "AdamW weight decay", kind=NON_NEGATIVE)
    grad_clip: float = option(1.0, "the gradients' global norm is clipped to this", kind=POSITIVE)
    rank: int = held(LowRankConfig, "rank")
    alpha: float = held(LowRankConfig, "alpha")
    target_modules: tuple[str, ...] | None = option(
        None, "the linear layers to adapt, by name, comma-separated", commands=DATA, kind=MODULE_NAMES,
        default_text="the model family's: {t5_targets} for T5, {causal_targets} for a causal LM")
    lora_dropout: float = held(LoraConfig, "lora_dropout")
    jump_dropout: float = held(JumpLoraConfig, "jump_dropout")
    bandwidth: float = held(JumpLoraConfig, "bandwidth")
    tau_reduction: str = held(JumpLoraConfig, "tau_reduction")
    jump_start: float = held(JumpLoraConfig, "jump_start")
    jump_final: float = held(JumpLoraConfig, "jump_final")
    authors_compat: bool = option(
        False, "JumpLoRA as the authors' code runs it, not SPEC: γ lags one step (γ(s − 1)), the sparse ELLA mask "
        "starts at S_start + 2, and the global τ by count keeps n − 1 entries; and MNLI's test rows labelled '-' "
        "are scored as wrong, as their script scores them", commands=METHOD,
        default_text="off, SPEC's schedule and count")
    max_source_tokens: int = option(512, "input length; only text is cut", commands=("run", "data-check"),
                                    kind=POSITIVE_INT)
    max_target_tokens: int = option(8, "label length in tokens", kind=POSITIVE_INT)
    eval_batch_size: int = option(64, "evaluation batch size", commands=("run",), kind=POSITIVE_INT)
    eval_mode: str = option("fast", "fast: one teacher-forced pass, generate only where undecided (same accuracy); "
                            "generate", commands=("run",), choices=EVAL_MODES)
    device: str = option("auto", "auto, cpu, cuda or cuda:N", commands=("run",), kind=Device())
    precision: str = option("fp32", "fp32, or bf16 autocast of the training forward (CUDA only; ΔW, masks and τ stay "
                            "fp32)", commands=("run",), choices=PRECISIONS)
    single_task_baselines: bool = option(False, "also train each task alone (cached per adapter kind) to get a0, FWT "
                                         "and FWT last row", commands=("run",))
    # the chosen method's own settings (`MethodSpec.settings`; None: it has none): given as a mapping (or left out:
    # its defaults), held as the method's dataclass; its options are `--<setting>` on the OWN_SETTINGS commands
    settings: Any = dataclasses.field(default=None, metadata={"settings": True})

    def __post_init__(self) -> None:
        if isinstance(self.target_modules, list):
            self.target_modules = tuple(self.target_modules)
        check_options(self)
        self.settings = method_settings(self.method, self.settings)
        if not 1 <= self.micro_batches <= self.batch_size:
            raise JumpLoRAError(f"--micro-batches must be between 1 and the batch size {self.batch_size}, "
                                f"got {self.micro_batches}")
        if self.full_lr is None:  # a configuration saved when it fell back to lr
            raise JumpLoRAError(f"--full-lr must be a positive number, got {self.full_lr}")
        if self.device != "auto":  # "auto" is resolved (and checked again) when training starts
            check_precision(self.precision, self.device)

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> RunConfig:
        """A configuration from flat values (options, a preset, methods.yaml): RunConfig's fields by name; any other
        name is a setting of the chosen method (refused in one line if it has no such setting), and a mapping under
        the method's name (as `to_dict` writes it) holds its settings too."""
        values = dict(values)
        method = values.get("method", cls.method)
        shared = {name: values.pop(name) for name in list(values) if name in RUN_FIELDS}
        settings = {**values.pop(method, {}), **values}
        if settings:
            shared["settings"] = settings
        return cls(**shared)

    def setting(self, name: str) -> Any:
        """The value of the method's own setting `name`, or None when its method has no such setting."""
        return getattr(self.settings, name, None)

    def settings_values(self) -> dict[str, Any]:
        """The method's own settings by name ({} for a method without settings)."""
        if dataclasses.is_dataclass(self.settings):
            return dataclasses.asdict(self.settings)
        return dict(self.settings or {})  # a method not registered here: as read

    def describe_settings(self) -> str:
        """The method's own settings in words, for plans and logs ("ella_delta sparse"; "" without settings)."""
        return ", ".join(f"{name} {value}" for name, value in self.settings_values().items())

    def to_dict(self) -> dict:
        """The fields by name, the method's own settings under its name (none for a method without settings)."""
        data = dataclasses.asdict(self)
        data["target_modules"] = None if self.target_modules is None else list(self.target_modules)
        if data.pop("settings") is not None:
            data[self.method] = self.settings_values()
        return data

    def digest(self, exclude: tuple[str, ...] = ()) -> str:
        """A stable hash of the resolved config, without the named fields."""
        return digest_of(self.to_dict(), exclude)


RUN_FIELDS = frozenset(field.name for field in dataclasses.fields(RunConfig))


def setting_names(settings: type | None) -> tuple[str, ...]:
    """The names of the options of a settings dataclass (without the dashes); () for None."""
    return tuple(field.name for field in option_fields(settings)) if settings is not None else ()


def not_read(name: str, method: str, readers: list[str]) -> JumpLoRAError:
    """The error of an option `--name` given to `method`, which does not read it (`readers` do)."""
    option_name = f"--{name.replace('_', '-')}"
    if not readers:
        return JumpLoRAError(f"{option_name} is not a setting of any method: leave it out")
    return JumpLoRAError(f"{option_name} is a setting of {', '.join(readers)}, which {method} does not read: leave "
                         "it out, or pass the --method that reads it")


# the method registry (`methods.registry.METHODS`: `find(name)`, its MethodSpec or None; `readers(name)`, the methods
# reading an option), once it has loaded (`use_registry`)
REGISTRY: list = []


def use_registry(registry) -> None:
    """Called by the method registry as it loads: config is a leaf, which cannot import it."""
    REGISTRY[:] = [registry]


def method_settings(method: str, given: object) -> object:
    """`method`'s settings dataclass (`MethodSpec.settings`; None without settings) from `given`: None (its
    defaults), a mapping of setting names, or a settings dataclass; a name the method does not read is refused
    (`not_read`). A method the registry does not know keeps `given` as it is: a finished run is read without its
    plugin, and `methods.check` refuses an unknown method before anything runs."""
    registry = REGISTRY[0]
    spec = registry.find(method)
    if spec is None:
        return given
    kind = spec.settings
    if kind is not None and isinstance(given, kind):
        return given
    values = dataclasses.asdict(given) if dataclasses.is_dataclass(given) else dict(given or {})
    for name in values:
        if name not in setting_names(kind):
            raise not_read(name, method, registry.readers(name))
    return None if kind is None else kind(**values)


def option_fields(cls: type) -> tuple[dataclasses.Field, ...]:
    """The fields of `cls` (RunConfig, or a method's settings) that are options (`option`)."""
    return tuple(field for field in dataclasses.fields(cls) if "help" in field.metadata)


def check_options(values: object) -> None:
    """Refuse, in one line naming its option, a value of an `option` field of `values` that `option_problem`
    finds wrong."""
    for field in option_fields(type(values)):
        value = getattr(values, field.name)
        problem = option_problem(field, value)
        if problem is not None:
            shown = list(value) if isinstance(value, tuple) else value
            raise JumpLoRAError(f"--{field.name.replace('_', '-')} {problem}, got {shown!r}")


def option_problem(field: dataclasses.Field, value: object) -> str | None:
    """What is wrong with `value` as the `option` field `field`'s (`must be …`), or None; None is "not set" (but
    where there are choices). A run's recorded config is checked with it too (`results.RunResults`)."""
    kind, choices = field.metadata["kind"], field.metadata["choices"]
    if choices is not None and value not in choices:
        return f"must be one of {', '.join(choices)}"
    if value is None:
        return None
    if isinstance(field.default, bool) and not isinstance(value, bool):
        return "must be true or false"
    return kind.problem(value) if kind is not None else None


def digest_of(config: dict, exclude: tuple[str, ...] = ()) -> str:
    """`RunConfig.digest` of a config as `to_dict` gave it (a results.json's), whatever fields RunConfig has now."""
    data = {k: v for k, v in config.items() if k not in exclude}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

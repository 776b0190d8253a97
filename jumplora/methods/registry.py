"""The method registry, declarations only (no torch: the options, the configuration and the result readers read it):
each continual method's `MethodSpec` (the built-in ones: `builtin`), added by `register` or by an installed package
through the entry-point group `jumplora.methods` (`Registry`), and the `Regulariser` protocol its training reads."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import sys
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from jumplora.adapter_kinds import AdapterKind
from jumplora.config import (
    LAMBDA_GRID,
    RUN_FIELDS,
    RunConfig,
    check_options,
    not_read,
    option_fields,
    setting_names,
    use_registry,
)
from jumplora.errors import JumpLoRAError
from jumplora.kinds import NON_NEGATIVE

if TYPE_CHECKING:
    import torch
    from torch import nn

    from jumplora.adapters.base import TaskAdapter
    from jumplora.distributed import Shard

ENTRY_POINTS = "jumplora.methods"


@dataclass(frozen=True)
class TaskContext:
    """What a regulariser reads once a task is trained and merged (`Regulariser.after_task`)."""

    model: nn.Module  # the merged model, in eval mode
    task: str  # the training's name: the task's ("mtl" for a joint training)
    examples: Sequence[object]  # the training's examples, encoded (what `nll` takes)
    nll: Callable[[object], torch.Tensor]  # −log p(label | source) of one example under `model`: a scalar with graph
    update: dict[str, torch.Tensor]  # the merged update per target module (on the CPU)
    device: torch.device  # the training device, where a regulariser keeps its memory
    shard: Shard  # this worker's share of a data-parallel run (`bounds`, `sum_all_`)


class Regulariser(Protocol):
    """What a method adds to the one loop beyond its adapter. It keeps what it remembers of past tasks in the run's
    `memory` (named tensors on the training device, saved in every checkpoint), so a resumed run goes on exactly."""

    def start_task(self, adapter: TaskAdapter) -> None:
        """The task's adapter is attached, before the first step (EWC: θ* ← the current weights)."""

    def loss(self, adapter: TaskAdapter, step: int, lam: float) -> torch.Tensor | None:
        """The term added to this step's CE (with gradient), or None when there is none."""

    def after_task(self, context: TaskContext) -> None:
        """The task is trained and merged: remember what the next tasks are weighed against."""


@dataclass(frozen=True)
class MethodSpec:
    """A continual method. `adapter` trains each task (a fresh one per task, merged after it); `regulariser(config,
    memory)` (or its reference, `resolve`) builds what the loss adds to CE (None: plain CE), reading the method's
    settings from `config.settings`; `per_task_lambda`: λ_t per task, from a table or the λ grid (SPEC §5); `joint`:
    one training on the union of the order's tasks (MTL); `settings`: the dataclass of the method's own settings
    (None: none), each field a `config.option` named as its option, checked by `config.check_options` (an a0 run has
    none); `default_lambda`: λ of every task after the first under `--lambdas paper` for a per-task-λ method without
    a table in search_spaces/lambdas.yaml (None: λ must be given); `lambda_grid`: the λ each stage of
    `grid_lambda.py` tries unless `--grid` is given (None: SPEC §5's grid, search_spaces/lambda_grid.yaml)."""

    name: str
    adapter: AdapterKind
    regulariser: Callable[[RunConfig, dict[str, torch.Tensor]], Regulariser] | str | None = None
    per_task_lambda: bool = False
    joint: bool = False
    settings: type | None = None
    default_lambda: float | None = None
    lambda_grid: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.strip() or " " in self.name or self.name in RUN_FIELDS:
            raise JumpLoRAError(f"a method's name must be one word and not a RunConfig field, got {self.name!r}")
        if not isinstance(self.adapter, AdapterKind):
            raise JumpLoRAError(f"method {self.name!r}: its adapter must be an AdapterKind (jumplora.adapters.LORA, "
                                f"JUMPLORA or FULL), got {self.adapter!r}")
        lam = self.default_lambda
        if lam is not None and (not self.per_task_lambda or NON_NEGATIVE.problem(lam)):
            raise JumpLoRAError(f"method {self.name!r}: its default_lambda must be a number ≥ 0 of a per-task-λ "
                                f"method (per_task_lambda=True), got {lam!r}")
        grid = self.lambda_grid
        if grid is not None and (not self.per_task_lambda or not isinstance(grid, tuple) or LAMBDA_GRID.problem(grid)):
            raise JumpLoRAError(f"method {self.name!r}: its lambda_grid must be a tuple of positive λ, each once, of "
                                f"a per-task-λ method (per_task_lambda=True), got {grid!r}")
        if self.settings is None:
            return
        if not (isinstance(self.settings, type) and dataclasses.is_dataclass(self.settings)):
            raise JumpLoRAError(f"method {self.name!r}: its settings must be a dataclass, got {self.settings!r}")
        fields = dataclasses.fields(self.settings)
        plain = [field.name for field in fields if field not in option_fields(self.settings)]
        shared = [field.name for field in fields if field.name in RUN_FIELDS]
        if plain or shared:  # each one is an option of every command: it needs its help, kind and default
            raise JumpLoRAError(f"method {self.name!r}: its settings {plain or shared} must each be declared with "
                                "jumplora.config.option(default, help, kind=...) under a name RunConfig does not have")
        try:
            check_options(self.settings())  # the defaults too are of their kinds
        except JumpLoRAError as error:
            raise JumpLoRAError(f"method {self.name!r}: its default {error}") from None


class Registry(Mapping[str, MethodSpec]):
    """name → MethodSpec, in registration order; the entry points are loaded on the first read."""

    def __init__(self) -> None:
        self.specs: dict[str, MethodSpec] = {}
        self.plugins_loaded = False
        self.broken: dict[str, str] = {}  # a plugin that does not load → why, told once; the other commands work

    def add(self, spec: MethodSpec) -> MethodSpec:
        """Add a method to the registry (every command's `--method` then offers it); returns `spec`."""
        known = self.specs.get(spec.name)
        if known is not None and known != spec:
            raise JumpLoRAError(f"method {spec.name!r} is registered twice, differently: give the new one another "
                                "name")
        for other in self.specs.values():  # one option per name: methods share a setting by sharing its dataclass
            clash = set(setting_names(spec.settings)) & set(setting_names(other.settings))
            if clash and spec.settings is not other.settings:
                raise JumpLoRAError(f"method {spec.name!r}: its settings {sorted(clash)} are already {other.name}'s "
                                    "options: name them after the method")
        self.specs[spec.name] = spec
        return spec

    def find(self, name: str) -> MethodSpec | None:
        """The method `name`, or None: a registered one without loading the plugins (the built-in methods are
        declared without torch; a plugin's module may import it), else after loading them."""
        return self.specs.get(name) or self.get(name)

    def readers(self, name: str) -> list[str]:
        """The registered methods that read the option `name` (`reads`), in registration order."""
        return [spec.name for spec in self.values() if name in reads(spec)]

    def load_plugins(self) -> None:
        if self.plugins_loaded:
            return
        self.plugins_loaded = True
        for entry in importlib.metadata.entry_points(group=ENTRY_POINTS):
            try:
                spec = entry.load()
                if not isinstance(spec, MethodSpec) or spec.name != entry.name:
                    raise JumpLoRAError(f"it must name a MethodSpec called {entry.name!r}, got {spec!r}")
                self.add(spec)
            except Exception as error:  # noqa: BLE001 - any failure of a plugin's code
                first = (str(error).strip().splitlines() or [""])[0][:200]
                self.broken[entry.name] = (f"the method plugin {entry.name!r} ({entry.value}) does not load "
                                           f"({type(error).__name__}: {first}): fix or uninstall its package")
                print(f"warning: {self.broken[entry.name]}; its method is not offered", file=sys.stderr)

    def __getitem__(self, name: str) -> MethodSpec:
        self.load_plugins()
        return self.specs[name]

    def __iter__(self) -> Iterator[str]:
        self.load_plugins()
        return iter(self.specs)

    def __len__(self) -> int:
        self.load_plugins()
        return len(self.specs)


METHODS = Registry()
use_registry(METHODS)
find, readers, register = METHODS.find, METHODS.readers, METHODS.add


def get_method(name: str) -> MethodSpec:
    if name in METHODS.broken:
        raise JumpLoRAError(METHODS.broken[name])
    if name not in METHODS:
        raise JumpLoRAError(f"unknown method {name!r}: choose one of {', '.join(METHODS)}")
    return METHODS[name]


def reads(spec: MethodSpec) -> set[str]:
    """The options of a method's own settings that `spec` reads: its own and its adapter's (RunConfig fields)."""
    return {*setting_names(spec.settings), *spec.adapter.fields}


def stacks(method: str) -> bool:
    """Whether `continual.run_task_group` trains this method's λ in one training (a per-task-λ method whose adapter
    kind holds K copies), rather than one by one (EWC); the Ray driver packs a grid's trials by it without torch."""
    spec = get_method(method)
    return spec.per_task_lambda and not spec.joint and spec.adapter.stacks


def plan_settings(config: RunConfig) -> str:
    """The settings a plan names for `config`'s method, in words ("threshold global, ella_delta sparse"; "" for
    none): the JumpLoRA threshold's grouping where the method reads it, then the method's own."""
    threshold = [f"threshold {config.threshold}"] if "threshold" in reads(get_method(config.method)) else []
    own = config.describe_settings()
    return ", ".join(threshold + ([own] if own else []))


def check(config: RunConfig, given: Collection[str] = ()) -> MethodSpec:
    """Refuse what `config`'s method cannot run, before anything loads: an unknown method, an option `given` on the
    command line that belongs to other methods' settings and this one does not read, adapter settings it cannot
    take, a0 runs of a joint method. Returns the method."""
    spec = get_method(config.method)
    for name in sorted(set(given) - reads(spec)):
        who = readers(name)
        if who:
            raise not_read(name, config.method, who)
    spec.adapter.check(config)
    if config.single_task_baselines and spec.joint:
        raise JumpLoRAError(f"--single-task-baselines: {config.method} trains once on all tasks, it has no FWT: "
                            "leave the option out")
    return spec


def checked_loss(method: str, term: object) -> torch.Tensor | None:
    """What a regulariser's `loss` returned, checked on its first call: None or a floating scalar tensor (a plugin's
    float or vector would fail later, deep in the step, without naming the method)."""
    import torch  # a training's check: torch is loaded already

    if term is None or isinstance(term, torch.Tensor) and term.dim() == 0 and term.is_floating_point():
        return term
    got = f"a tensor of shape {tuple(term.shape)} and {term.dtype}" if isinstance(term, torch.Tensor) else \
        f"{type(term).__name__} {term!r:.40}"
    raise JumpLoRAError(f"method {method!r}: its regulariser's loss(adapter, step, lam) returned {got}; it must "
                        "return a floating scalar tensor (with gradient) or None: fix the method's code")


def plain_method(adapter: AdapterKind) -> MethodSpec:
    """The method that trains `adapter` alone, one task after another with plain CE (IncLoRA for LoRA): how an a0 of
    that kind is trained (SPEC §4)."""
    for spec in METHODS.values():
        if spec.adapter == adapter and spec.regulariser is None and not spec.joint:
            return spec
    raise JumpLoRAError(f"no method trains the {adapter.name} adapter alone, so its a0 cannot be trained: register "
                        "one without a regulariser")


def settings_fields() -> dict[str, dataclasses.Field]:
    """The option fields of every registered method's own settings, by name, in registration order (each name has
    one declaration: `Registry.add`)."""
    return {field.name: field for spec in METHODS.values() if spec.settings is not None
            for field in option_fields(spec.settings)}


def adapter_kinds() -> list[AdapterKind]:
    """The adapter kinds of the registered methods, each once."""
    return list(dict.fromkeys(spec.adapter for spec in METHODS.values()))


def label(method: str, config: Mapping[str, Any]) -> str:
    """`method` as a report names its runs: with the settings of named choices that it reads (its adapter's and its
    own, `reads`) where `config` (a results.json's: its own settings under its name, or flat in an older one) sets
    them away from their defaults: "jumplora+ella (per_block, interpolated)"."""
    spec = find(method)
    if spec is None:
        return method
    fields = {field.name: field for settings in (spec.adapter.settings, spec.settings) if settings is not None
              for field in option_fields(settings)}
    own = config.get(method, config)
    shown = [str(value) for name, field in fields.items() if field.metadata["choices"]
             for value in [own.get(name, config.get(name, field.default))] if value != field.default]
    return f"{method} ({', '.join(shown)})" if shown else method

"""How a method trains one task, as data (`AdapterKind`), and the built-in kinds `LORA`, `JUMPLORA` and `FULL`. Below
both `jumplora.adapters` (which implements them) and `jumplora.methods` (whose `MethodSpec` names one); loads no
torch."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jumplora.config import FullConfig, JumpLoraConfig, LoraConfig, RunConfig, setting_names
from jumplora.families import DEFAULT_TARGET_MODULES, SEQ2SEQ, family_of

if TYPE_CHECKING:
    from torch import nn

    from jumplora.adapters.base import AdapterCopies


def resolve(reference: Any) -> Any:
    """What `reference` names: "package.module:Name.attribute" imported (the implementation of a declaration, loaded
    when it is used); anything else is itself."""
    if not isinstance(reference, str):
        return reference
    module, _, path = reference.partition(":")
    found = importlib.import_module(module)
    for name in path.split("."):
        found = getattr(found, name)
    return found


def targets(config: RunConfig, model: nn.Module) -> tuple[str, ...]:
    """The adapted linear layers of `model`: `config.target_modules`, else the model family's default."""
    return config.target_modules or DEFAULT_TARGET_MODULES[family_of(model)]


@dataclass(frozen=True)
class AdapterKind:
    """How a method trains one task (`MethodSpec.adapter`). `adapter(model, settings, total_steps, copies)` (or its
    reference, `resolve`) attaches K copies of a fresh adapter (`adapters.AdapterCopies`); `settings` is its config
    dataclass (`config.LoraConfig`...), each field the RunConfig field of the same name (`configure`; an a0 of this
    kind is keyed by them, `fields`); `whole_model`: no adapter, every weight trains (at `full_lr`; a checkpoint keeps
    the whole model)."""

    name: str
    adapter: Callable[[nn.Module, object, int, int], AdapterCopies] | str
    settings: type
    whole_model: bool = False

    @property
    def fields(self) -> tuple[str, ...]:
        return setting_names(self.settings)

    def configure(self, config: RunConfig, target_modules: tuple[str, ...]):
        """The adapter's settings (checked by their `__post_init__`) from `config`, for these target modules."""
        names = [field.name for field in dataclasses.fields(self.settings) if field.name != "target_modules"]
        return self.settings(target_modules=target_modules, **{name: getattr(config, name) for name in names})

    def build(self, model: nn.Module, config: RunConfig, total_steps: int, copies: int = 1) -> AdapterCopies:
        """`copies` copies of a fresh adapter of this kind on `model` for a task of `total_steps` optimizer steps."""
        return resolve(self.adapter)(model, self.configure(config, targets(config, model)), total_steps, copies)

    @property
    def stacks(self) -> bool:
        """Whether this kind trains K λ of a task in one training (as its class's `AdapterCopies.stacks` says), known
        without importing the adapter: one whose every weight trains cannot hold copies (K models)."""
        return not self.whole_model

    def check(self, config: RunConfig) -> None:
        """Refuse settings this adapter cannot take (rank, alpha, schedule...) before anything loads."""
        self.configure(config, config.target_modules or DEFAULT_TARGET_MODULES[SEQ2SEQ])

    def lr(self, config: RunConfig) -> float:
        """The optimizer's learning rate: `full_lr` when every weight trains, else `lr`."""
        return config.full_lr if self.whole_model else config.lr


LORA = AdapterKind("lora", "jumplora.adapters.lora:LoraAdapter", LoraConfig)
JUMPLORA = AdapterKind("jumplora", "jumplora.adapters.jumplora.model:JumpLoraAdapter", JumpLoraConfig)
FULL = AdapterKind("full", "jumplora.adapters.full:FullFineTune", FullConfig, whole_model=True)

"""Plain LoRA (IncLoRA, ELLA) through PEFT, behind the same small protocol as the JumpLoRA adapter."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from jumplora.adapters.base import AdapterKind, Factors
from jumplora.errors import JumpLoRAError

if TYPE_CHECKING:
    from peft.tuners.lora import LoraLayer

ADAPTER_NAME = "default"


@dataclass(frozen=True)
class PlainLoraConfig:
    """PEFT LoRA's settings, named as the `RunConfig` fields they come from (`AdapterKind.configure`)."""

    rank: int
    alpha: float
    target_modules: tuple[str, ...]
    lora_dropout: float

    def __post_init__(self) -> None:
        if self.rank < 1 or self.alpha <= 0:
            raise JumpLoRAError(f"LoRA needs --rank ≥ 1 and --alpha > 0, got rank={self.rank}, alpha={self.alpha}")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise JumpLoRAError(f"--lora-dropout must be in [0, 1), got {self.lora_dropout}")


class PeftLoraAdapter:
    """A fresh PEFT LoRA on `model` for one task: ΔW = B A, y = x W^T + β B A dropout(x), merged after the task."""

    def __init__(self, model: nn.Module, config: PlainLoraConfig, total_steps: int) -> None:
        # PEFT is imported by the training that uses it: the adapter kinds, and the registry built on them, import no
        # model library (a command that only reads results or options does not load it)
        from peft import LoraConfig, get_peft_model
        from peft.tuners.lora import LoraLayer

        self.model = model
        self.config = config
        self.total_steps = total_steps
        peft_config = LoraConfig(r=config.rank, lora_alpha=config.alpha, target_modules=list(config.target_modules),
                                 lora_dropout=config.lora_dropout, bias="none")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            self.peft_model = get_peft_model(model, peft_config)
        self.layers: dict[str, LoraLayer] = {
            name: module for name, module in model.named_modules() if isinstance(module, LoraLayer)
        }
        if not self.layers:
            raise JumpLoRAError(f"no module named {', '.join(config.target_modules)} to adapt: check --target-modules")

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [
            p
            for layer in self.layers.values()
            for p in (layer.lora_A[ADAPTER_NAME].weight, layer.lora_B[ADAPTER_NAME].weight)
        ]

    def factors(self) -> dict[str, Factors]:
        """ΔW = B A per module, built when asked (a plain LoRA has no mask)."""
        return {name: factors_of(layer) for name, layer in self.layers.items()}

    def before_step(self, step: int) -> None:
        """Plain LoRA has no schedule."""

    def after_step(self, step: int) -> None:
        """Plain LoRA has no threshold."""

    def thresholds(self) -> dict[str, float]:
        return {}

    def merge(self) -> dict[str, torch.Tensor]:
        """W ← W + β B A (PEFT's merge_and_unload); returns β B A per module."""
        with torch.no_grad():
            updates = {name: layer.get_delta_weight(ADAPTER_NAME).detach() for name, layer in self.layers.items()}
        self.peft_model.merge_and_unload()
        if hasattr(self.model, "peft_config"):
            del self.model.peft_config  # a plain model again, so the next task's get_peft_model starts clean
        self.layers = {}
        return updates


def factors_of(layer: LoraLayer) -> Factors:
    a, b = layer.lora_A[ADAPTER_NAME].weight, layer.lora_B[ADAPTER_NAME].weight
    return Factors(a=a, b=b, scaling=layer.scaling[ADAPTER_NAME], delta=lambda: b @ a, mask=lambda: None)


LORA = AdapterKind("lora", PeftLoraAdapter, PlainLoraConfig, fields=("rank", "alpha", "lora_dropout"))

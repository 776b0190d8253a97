"""The built-in methods, declared (SPEC §2, §7; in the order the commands list them): each one's adapter kind, λ and
own settings, and its regulariser by reference (`adapter_kinds.resolve`: its module, `ella`, `ewc` or `olora`, which
imports torch, is loaded when training starts). A method without a regulariser trains its adapter kind alone, on plain
CE, as an a0 of that kind is trained (`registry.plain_method`); MTL trains one LoRA once, on the union of the order's
tasks, shuffled: the multi-task upper bound."""

from __future__ import annotations

from jumplora.adapter_kinds import FULL, JUMPLORA, LORA
from jumplora.config import option, settings
from jumplora.kinds import NON_NEGATIVE, POSITIVE_INT
from jumplora.methods.registry import MethodSpec, register

ELLA_DELTA_MODES = ("sparse", "interpolated")  # ΔW_eff of a JumpLoRA adapter: hard-masked, or interpolated with γ


@settings
class EllaSettings:
    """ELLA's own settings (λ_t comes per task from `--lambdas` or the grid: SPEC §5)."""

    ella_delta: str = option("sparse", "ΔW in JumpLoRA+ELLA's penalty: hard-masked after S_start, or interpolated "
                             "with γ", choices=ELLA_DELTA_MODES)


@settings
class EwcSettings:
    """EWC's own settings (λ_t: `search_spaces/lambdas.yaml` `constant.ewc`, or `--lambdas`)."""

    ewc_fisher_samples: int = option(256, "EWC: training examples per task (a seeded sample) for the diagonal Fisher",
                                     kind=POSITIVE_INT)


@settings
class OLoraSettings:
    """O-LoRA's weights, fixed for every task (O-LoRA's defaults; the run's per-task λ is not used)."""

    olora_lambda1: float = option(0.5, "O-LoRA: weight of Σ|A_past A_tᵀ| (orthogonality to the past tasks' lora_A)",
                                  kind=NON_NEGATIVE)
    olora_lambda2: float = option(0.0, "O-LoRA: weight of ‖A_t‖ + ‖B_t‖", kind=NON_NEGATIVE)


ELLA, EWC, OLORA = "jumplora.methods.ella:Ella.from_config", "jumplora.methods.ewc:Ewc.from_config", \
    "jumplora.methods.olora:OLora.from_config"
register(MethodSpec("inclora", adapter=LORA))
register(MethodSpec("jumplora+inclora", adapter=JUMPLORA))
register(MethodSpec("seqft", adapter=FULL))
register(MethodSpec("ella", adapter=LORA, regulariser=ELLA, per_task_lambda=True, settings=EllaSettings))
register(MethodSpec("jumplora+ella", adapter=JUMPLORA, regulariser=ELLA, per_task_lambda=True, settings=EllaSettings))
register(MethodSpec("ewc", adapter=FULL, regulariser=EWC, per_task_lambda=True, settings=EwcSettings))
register(MethodSpec("o-lora", adapter=LORA, regulariser=OLORA, settings=OLoraSettings))
register(MethodSpec("jumplora+o-lora", adapter=JUMPLORA, regulariser=OLORA, settings=OLoraSettings))
register(MethodSpec("mtl", adapter=LORA, joint=True))

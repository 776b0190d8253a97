"""The lean training step: ELLA's P without full-size temporaries equals P from the ΔW_eff of SPEC §2, bf16 is
refused off CUDA, and the adapted JumpLoRA linear stays fp32 in its update under autocast."""

import pytest
import torch

from jumplora.adapters import JUMPLORA, LORA, JumpLoraAdapter, LoraAdapter
from jumplora.config import RunConfig, check_precision
from jumplora.errors import JumpLoRAError
from jumplora.methods.ella import adapter_penalty, ella_penalty
from tests.conftest import adapter_settings

TOTAL_STEPS = 10  # S_start = 2, S_final = 8


def adapted(kind, model):
    if kind == "lora":
        adapter = LoraAdapter(model, adapter_settings(LORA, rank=4, alpha=16, lora_dropout=0.0), TOTAL_STEPS)
    else:
        adapter = JumpLoraAdapter(model, adapter_settings(JUMPLORA, rank=4, alpha=16, threshold=kind), TOTAL_STEPS)
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in adapter.trainable_parameters(0):
            if p.dim() == 2:
                p.copy_(0.3 * torch.randn(p.shape, generator=generator))
    return adapter


def reference_deltas(adapter, mode: str, step: int) -> dict[str, torch.Tensor]:
    """β · ΔW_eff per module, dense, as SPEC §2 writes it: LoRA's β B A; JumpLoRA's ΔW up to S_start, then
    ΔW ⊙ H(|ΔW| − τ) (sparse) or γ·(ΔW ⊙ H) + (1 − γ)·ΔW (interpolated), from the ΔW of this step's forward."""
    if not isinstance(adapter, JumpLoraAdapter):
        return {name: layer.scaling * (layer.lora_B[0] @ layer.lora_A[0]) for name, layer in adapter.layers.items()}
    deltas = {}
    for name, layer in adapter.layers.items():
        delta = layer.last_delta[0]
        if step > adapter.s_start:
            masked = delta * layer.hard_mask(delta, 0)
            gamma = layer.group.gamma
            delta = masked if mode == "sparse" else gamma * masked + (1.0 - gamma) * delta
        deltas[name] = layer.scaling * delta
    return deltas


def past_for(adapter, skip_one: bool):
    generator = torch.Generator().manual_seed(7)
    deltas = reference_deltas(adapter, "sparse", 1)
    names = list(deltas)[1:] if skip_one else list(deltas)  # a module without a past is not counted
    return {name: torch.randn(deltas[name].shape, generator=generator) for name in names}


CASES = [("global", mode, step) for mode in ("sparse", "interpolated") for step in (1, 5, TOTAL_STEPS)]  # γ 0, .5, 1
CASES += [("per_block", "interpolated", 5), ("lora", "sparse", 5)]


@pytest.mark.parametrize(("kind", "mode", "step"), CASES)
def test_lean_penalty_equals_the_reference(kind, mode, step, t5, t5_batch):
    adapter = adapted(kind, t5)
    adapter.after_step(getattr(adapter, "s_start", 1))  # τ by count (JumpLoRA)
    adapter.before_step(step)
    t5(**t5_batch)  # builds ΔW once; both penalties reuse it
    past = past_for(adapter, skip_one=True)
    params = adapter.trainable_parameters(0)

    reference = ella_penalty(reference_deltas(adapter, mode, step), past)
    ref_grads = torch.autograd.grad(reference, params, allow_unused=True, retain_graph=True)
    lean = adapter_penalty(adapter.factors(0), mode, past)
    lean_grads = torch.autograd.grad(lean, params, allow_unused=True, retain_graph=True)

    assert float(reference.detach()) > 0
    torch.testing.assert_close(lean, reference, rtol=1e-5, atol=0)
    for ref, got in zip(ref_grads, lean_grads, strict=True):
        if ref is None:
            assert got is None or not got.any()  # the hard mask sends no gradient to τ
        else:
            torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-7)


def test_lean_penalty_is_zero_without_a_past(t5, t5_batch):
    adapter = adapted("global", t5)
    assert float(adapter_penalty(adapter.factors(0), "sparse", {})) == 0.0


def test_bf16_is_refused_off_cuda():
    with pytest.raises(JumpLoRAError, match="needs a CUDA device"):
        check_precision("bf16", torch.device("cpu"))
    with pytest.raises(JumpLoRAError, match="needs a CUDA device"):
        RunConfig(precision="bf16", device="cpu")
    with pytest.raises(JumpLoRAError, match="--precision must be one of"):
        RunConfig(precision="fp16")
    check_precision("fp32", torch.device("cpu"))
    assert RunConfig(precision="bf16", device="cuda").precision == "bf16"


def test_update_stays_fp32_under_autocast(t5, t5_batch):
    """Autocast (bf16 on CPU here, as a stand-in for CUDA) leaves ΔW, the mask and τ in fp32."""
    adapter = adapted("global", t5)
    adapter.after_step(adapter.s_start)
    adapter.before_step(TOTAL_STEPS)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = t5(**t5_batch).loss
    loss.backward()
    layer = next(iter(adapter.layers.values()))
    assert layer.last_delta[0].dtype == torch.float32
    assert adapter.groups["global"].log_tau[0].grad is not None
    assert adapter.groups["global"].log_tau[0].grad.dtype == torch.float32

"""Continual methods: IncLoRA, ELLA, and their JumpLoRA versions (SPEC §2)."""

from jumplora.methods.ella import PastUpdates, ella_penalty, weighted_penalty
from jumplora.methods.registry import ELLA_DELTA_MODES, METHODS, MethodSpec, get_method

__all__ = ["ELLA_DELTA_MODES", "METHODS", "MethodSpec", "PastUpdates", "ella_penalty", "get_method",
           "weighted_penalty"]

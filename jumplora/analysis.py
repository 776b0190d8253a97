"""Sparsity and support overlap of each task's merged update ΔW_final (SPEC §4)."""

from __future__ import annotations

from collections import Counter

import torch

from jumplora.adapters.jumplora.model import block_of

Updates = dict[str, torch.Tensor]  # module path → β·ΔW_final of one task


def sparsity(updates: Updates) -> dict:
    """Fraction of zero entries: {"overall": f, "per_layer": {block: f}, "per_module": {module: f}}, a block's over
    its adapted modules (`encoder.block.3`, …)."""
    zeros = {name: int((u == 0).sum()) for name, u in updates.items()}
    per_layer: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for name, u in updates.items():
        per_layer[block_of(name)] += zeros[name]
        total[block_of(name)] += u.numel()
    return {"overall": sum(zeros.values()) / sum(total.values()),
            "per_layer": {block: per_layer[block] / total[block] for block in total},
            "per_module": {name: zeros[name] / u.numel() for name, u in updates.items()}}


def jaccard(a: torch.Tensor, b: torch.Tensor) -> float:
    """|supp a ∩ supp b| / |supp a ∪ supp b| (1.0 when both are all zero: identical empty supports)."""
    sa, sb = a != 0, b != 0
    union = int((sa | sb).sum())
    return 1.0 if union == 0 else int((sa & sb).sum()) / union


def mean_jaccard(first: Updates, second: Updates, modules: list[str] | None = None) -> float:
    """Per-module Jaccard of the supports, averaged over the shared modules (or over `modules`)."""
    names = modules if modules is not None else sorted(set(first) & set(second))
    return sum(jaccard(first[n], second[n]) for n in names) / len(names)


def jaccard_matrix(per_task: list[Updates]) -> list[list[float]]:
    """J[i][j] = mean over modules of the Jaccard index of tasks i and j's supports."""
    return [[mean_jaccard(a, b) for b in per_task] for a in per_task]


def middle_block(names: list[str]) -> str:
    """The middle layer of SPEC §4: block ⌊L/2⌋ of an L-block encoder (`encoder.block.12` of t5-large); a causal
    model has no encoder, so its middle decoder layer (`model.layers.8` of a 16-layer Llama)."""
    blocks = {block_of(n) for n in names}
    encoder = {b for b in blocks if b.startswith("encoder.")}
    ordered = sorted(encoder or blocks, key=lambda b: int(b.rsplit(".", 1)[1]))
    return ordered[len(ordered) // 2]


def overlap_with_earlier(per_task: list[Updates]) -> list[float | None]:
    """For each task t > 0: mean Jaccard with every earlier task, in the middle block (None for task 0)."""
    middle = middle_block(list(per_task[0]))
    modules = sorted(n for n in per_task[0] if block_of(n) == middle)
    return [None] + [sum(mean_jaccard(per_task[t], per_task[j], modules) for j in range(t)) / t
                     for t in range(1, len(per_task))]

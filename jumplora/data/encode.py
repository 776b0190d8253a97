"""Prompt format, tokenisation (truncating only the example text) and padded batches."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from jumplora.data.types import Example, TaskSpec

OPTION_SEPARATOR = " | "
ANSWER_SUFFIX = "\nAnswer:"
IGNORE_INDEX = -100


def prompt_prefix(spec: TaskSpec) -> str:
    """The part of the source before the example text, never truncated: the instruction exactly as given (it may
    end in a newline, or be empty) and the answer options (SPEC §3, the authors' `make_base_prompt`)."""
    return f"Task Instruction: {spec.instruction}\nOptions: {OPTION_SEPARATOR.join(spec.options)}\nText: "


def prompt_source(spec: TaskSpec, text: str) -> str:
    """The whole source as one string, `</s>` aside: prefix, example text, answer cue. `PromptEncoder` tokenises
    the three pieces separately, so that it can cut the text alone; they meet at whitespace, so a tokenizer that
    splits words at whitespace and drops it (T5's, the tiny preset's) gives the ids of tokenising this string."""
    return f"{prompt_prefix(spec)}{text}{ANSWER_SUFFIX}"


def normalise_answer(text: str) -> str:
    """SPEC §4: strip, lower-case, collapse whitespace."""
    return " ".join(text.strip().lower().split())


@dataclass(frozen=True)
class Encoded:
    input_ids: tuple[int, ...]
    label_ids: tuple[int, ...]
    label: str


class PromptEncoder:
    """Turns (task, example) into token ids: `prefix + text + suffix + </s>`, cutting only the text when too long
    (the authors cut the whole source at 512 tokens, which can drop "Answer:"; see docs/DECISIONS.md)."""

    def __init__(self, tokenizer, max_source_tokens: int = 512, max_target_tokens: int = 8) -> None:
        self.tokenizer = tokenizer
        self.max_source_tokens = max_source_tokens
        self.max_target_tokens = max_target_tokens
        self._suffix = self._ids(ANSWER_SUFFIX)
        self._prefix_cache: dict[TaskSpec, list[int]] = {}

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _prefix(self, spec: TaskSpec) -> list[int]:
        if spec not in self._prefix_cache:
            self._prefix_cache[spec] = self._ids(prompt_prefix(spec))
        return self._prefix_cache[spec]

    def source_length(self, spec: TaskSpec, text: str) -> int:
        """Tokens of the untruncated source, `</s>` included."""
        return len(self._prefix(spec)) + len(self._ids(text)) + len(self._suffix) + 1

    def encode(self, spec: TaskSpec, example: Example) -> Encoded:
        prefix = self._prefix(spec)
        room = self.max_source_tokens - len(prefix) - len(self._suffix) - 1
        text_ids = self._ids(example.text)[: max(room, 0)]
        eos = self.tokenizer.eos_token_id
        source = prefix + text_ids + self._suffix + [eos]
        target = self._ids(example.label)[: self.max_target_tokens - 1] + [eos]
        return Encoded(tuple(source[: self.max_source_tokens]), tuple(target), example.label)

    def encode_all(self, spec: TaskSpec, examples: list[Example]) -> list[Encoded]:
        return [self.encode(spec, ex) for ex in examples]


def collate(batch: list[Encoded], pad_id: int, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Right-padded `input_ids` (B, L_src), `attention_mask`, and `labels` (B, L_tgt) with -100 on padding."""
    src_len = max(len(e.input_ids) for e in batch)
    tgt_len = max(len(e.label_ids) for e in batch)
    input_ids = torch.full((len(batch), src_len), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), tgt_len), IGNORE_INDEX, dtype=torch.long)
    for i, e in enumerate(batch):
        input_ids[i, : len(e.input_ids)] = torch.tensor(e.input_ids)
        labels[i, : len(e.label_ids)] = torch.tensor(e.label_ids)
    return {
        "input_ids": input_ids.to(device),
        "attention_mask": (input_ids != pad_id).long().to(device),
        "labels": labels.to(device),
    }


def epoch_order(n_examples: int, seed: int, task_name: str) -> list[int]:
    """The seeded order in which one task's training examples are visited (same on every worker)."""
    order = list(range(n_examples))
    random.Random(f"{seed}:{task_name}").shuffle(order)
    return order


def global_batches(order: list[int], batch_size: int) -> list[list[int]]:
    """Consecutive global batches of `batch_size`; the last one may be smaller (nothing is dropped)."""
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def length_sorted_batches(encoded: list[Encoded], batch_size: int) -> list[list[int]]:
    """Evaluation batches of similar source length, so little compute goes to padding."""
    by_length = sorted(range(len(encoded)), key=lambda i: len(encoded[i].input_ids))
    return [by_length[i : i + batch_size] for i in range(0, len(by_length), batch_size)]

"""Prompt format, tokenisation (truncating only the example text) and padded batches."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from jumplora.data.types import Example, TaskSpec

if TYPE_CHECKING:  # the tensors of a batch only (`_padded`): counting tokens loads no torch
    import torch

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
    """One example's token ids. Seq2seq: `input_ids` = the source + `</s>`, `label_ids` = the answer + `</s>`.
    Causal: `input_ids` = the prompt (after the tokenizer's BOS, if it adds one), `label_ids` = the answer's tokens as
    they follow the prompt (" " + label) + EOS; the model reads `input_ids + label_ids[:-1]`."""

    input_ids: tuple[int, ...]
    label_ids: tuple[int, ...]
    label: str


class TokenizerFile:
    """A model folder's `tokenizer.json` read by the `tokenizers` library alone, called as a transformers tokenizer is
    for what `PromptEncoder` counts (a plan's source tokens: transformers' tokenizer classes load torch)."""

    def __init__(self, folder: Path) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        eos = json.loads((folder / "tokenizer_config.json").read_text()).get("eos_token")
        eos = eos.get("content") if isinstance(eos, dict) else eos
        self.eos_token_id = None if eos is None else self.tokenizer.token_to_id(eos)

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids}


class PromptEncoder:
    """Turns (task, example) into token ids: `prefix + text + suffix` (+ `</s>` for seq2seq), cutting only the text
    when too long (the authors cut the whole source at 512 tokens, which can drop "Answer:"; see docs/DECISIONS.md).
    With `causal`, the source is the prompt of a decoder-only model and the answer follows it after a space."""

    def __init__(self, tokenizer, max_source_tokens: int = 512, max_target_tokens: int = 8,
                 causal: bool = False) -> None:
        self.tokenizer = tokenizer
        self.max_source_tokens = max_source_tokens
        self.max_target_tokens = max_target_tokens
        self.causal = causal
        self._suffix = self._ids(ANSWER_SUFFIX)
        # causal: the prompt opens with the tokens the tokenizer puts before a text (Llama's BOS; none for Qwen's or
        # the tiny preset's) and the answer follows it; seq2seq: `</s>` ends the source
        self._lead, self._end = (self._leading_special_ids(), []) if causal else ([], [tokenizer.eos_token_id])
        self._prefix_cache: dict[TaskSpec, list[int]] = {}

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _leading_special_ids(self) -> list[int]:
        plain, special = self._ids("a"), self.tokenizer("a")["input_ids"]
        start = len(special) - len(plain)
        return list(special[:start]) if start > 0 and special[start:] == plain else []

    def _prefix(self, spec: TaskSpec) -> list[int]:
        if spec not in self._prefix_cache:
            self._prefix_cache[spec] = self._lead + self._ids(prompt_prefix(spec))
        return self._prefix_cache[spec]

    def _answer_ids(self, label: str) -> list[int]:
        """Seq2seq: the label's tokens. Causal: the tokens of " " + label as they follow "Answer:" (tokenised with
        it, then the cue's own tokens removed), so training and decoding see the ids the model would write there."""
        if not self.causal:
            return self._ids(label)
        joint = self._ids(f"{ANSWER_SUFFIX} {label}")
        if joint[: len(self._suffix)] == self._suffix:
            return joint[len(self._suffix):]
        return self._ids(f" {label}")

    def source_length(self, spec: TaskSpec, text: str) -> int:
        """Tokens of the untruncated source (seq2seq: `</s>` included)."""
        return self.max_source_tokens - self.text_room(spec) + len(self._ids(text))

    def text_room(self, spec: TaskSpec) -> int:
        """How many tokens of an example's text fit in `max_source_tokens` beside the task's prompt (≤ 0: none)."""
        return self.max_source_tokens - len(self._prefix(spec)) - len(self._suffix) - len(self._end)

    def encode(self, spec: TaskSpec, example: Example) -> Encoded:
        text_ids = self._ids(example.text)[: max(self.text_room(spec), 0)]
        source = self._prefix(spec) + text_ids + self._suffix + self._end
        target = self._answer_ids(example.label)[: self.max_target_tokens - 1] + [self.tokenizer.eos_token_id]
        return Encoded(tuple(source[: self.max_source_tokens]), tuple(target), example.label)

    def encode_prompt(self, prompt: str) -> Encoded:
        """A whole source already in the prompt format (`prompt_source`), for decoding only (no label): the ids
        `encode` gives when the text needs no cut (the pieces meet at whitespace), cut to `max_source_tokens`."""
        return Encoded(tuple((self._lead + self._ids(prompt) + self._end)[: self.max_source_tokens]), (), "")

    def encode_all(self, spec: TaskSpec, examples: list[Example]) -> list[Encoded]:
        return [self.encode(spec, ex) for ex in examples]


def collate(batch: list[Encoded], pad_id: int, device: torch.device | str = "cpu",
            causal: bool = False) -> dict[str, torch.Tensor]:
    """A right-padded training (or teacher-forced) batch; `labels` (B, L_tgt) = the label tokens, -100 on padding,
    for both families, so that logits (B, L_tgt, V) line up with them (`losses.label_logits`).

    Seq2seq: `input_ids` (B, L_src) and `attention_mask`; the labels are also the decoder's inputs (shifted right by
    the model). Causal: `input_ids` (B, L) = prompt + label[:-1] and `attention_mask`; `label_positions` (B, L_tgt)
    = where label token j is predicted, len(prompt) - 1 + j (0 on padding), so the model projects only those
    positions onto the vocabulary.
    """
    rows = [e.input_ids + e.label_ids[:-1] if causal else e.input_ids for e in batch]
    out = _inputs(rows, pad_id)
    if causal:
        out["label_positions"] = _padded([tuple(range(len(e.input_ids) - 1, len(e.input_ids) - 1 + len(e.label_ids)))
                                          for e in batch], 0)
    out["labels"] = _padded([e.label_ids for e in batch], IGNORE_INDEX)
    return {key: value.to(device) for key, value in out.items()}


def prompt_batch(batch: list[Encoded], pad_id: int, device: torch.device | str = "cpu",
                 causal: bool = False) -> dict[str, torch.Tensor]:
    """The sources alone, for `generate`: right-padded for seq2seq, left-padded for a causal model (so every row's
    next token follows its prompt directly)."""
    return {key: value.to(device) for key, value in _inputs([e.input_ids for e in batch], pad_id, causal).items()}


def _inputs(rows: list[tuple[int, ...]], pad_id: int, left: bool = False) -> dict[str, torch.Tensor]:
    """`input_ids` padded with `pad_id` and their `attention_mask`."""
    ones = [(1,) * len(row) for row in rows]
    return {"input_ids": _padded(rows, pad_id, left), "attention_mask": _padded(ones, 0, left)}


def _padded(rows: list[tuple[int, ...]], value: int, left: bool = False) -> torch.Tensor:
    import torch

    out = torch.full((len(rows), max(len(r) for r in rows)), value, dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            start = out.shape[1] - len(row) if left else 0
            out[i, start : start + len(row)] = torch.tensor(row)
    return out


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
    return global_batches(sorted(range(len(encoded)), key=lambda i: len(encoded[i].input_ids)), batch_size)

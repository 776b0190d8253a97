"""The tiny preset's tokenizer: a case-sensitive Unigram (SentencePiece-style) model over the texts, T5's ids."""

from __future__ import annotations

import json
import re
import string
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import Unigram
from tokenizers.trainers import UnigramTrainer
from transformers import PreTrainedTokenizerFast

from jumplora.data.encode import OPTION_SEPARATOR, prompt_source
from jumplora.data.types import TaskSpec

if TYPE_CHECKING:
    from jumplora.tiny import TinyModelConfig

SPECIAL_TOKENS = ("<pad>", "</s>", "<unk>")
OPTION_MAX_WORDS = 4
OPTION_WEIGHT = 50
OPTION_PREFIX = "Option: "
METASPACE = "\u2581"
# The words of the prompt template (`encode.prompt_source`), each one piece at the best score: they open every
# prompt, and the trainer alone splits them into many ("Task Instruction:" took 14 pieces), which made every prompt
# ~25 tokens longer and the preset's build ~50 % slower.
TEMPLATE_PIECES = tuple(
    METASPACE + word
    for word in re.findall(r"[A-Za-z]+|\|", prompt_source(TaskSpec("template", "", ()), "") + OPTION_SEPARATOR)
)


def build_tokenizer(texts: Sequence[str], tiny_config: TinyModelConfig) -> PreTrainedTokenizerFast:
    """A case-sensitive Unigram tokenizer over every character of `texts`, appending `</s>`, with T5 sentinels."""
    sentinels = [f"<extra_id_{index}>" for index in range(tiny_config.num_sentinels)]
    tokenizer = Tokenizer(Unigram())
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.NFKC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = UnigramTrainer(vocab_size=tiny_config.vocab_size, special_tokens=[*SPECIAL_TOKENS, *sentinels],
                             unk_token="<unk>", show_progress=False, initial_alphabet=list(string.printable.strip()))
    tokenizer.train_from_iterator(_training_texts(texts), trainer=trainer)
    tokenizer.model = _canonical_unigram(tokenizer, len(SPECIAL_TOKENS) + len(sentinels), tiny_config.vocab_size)
    eos_id = tokenizer.token_to_id("</s>")
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                             special_tokens=[("</s>", eos_id)])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def is_option(text: str) -> bool:
    """Whether `text` is short enough to be an answer option (at most OPTION_MAX_WORDS words)."""
    return 0 < len(text.split()) <= OPTION_MAX_WORDS


def _canonical_unigram(tokenizer: Tokenizer, n_special: int, vocab_size: int) -> Unigram:
    """The trained Unigram model with TEMPLATE_PIECES at the best score (replacing the worst multi-character pieces
    if the vocabulary would overflow), ids in piece order and scores rounded to 0.1: the trainer returns the same
    pieces in a varying order with score noise (up to ~0.005), which would change ids and tie-breaks between builds."""
    vocab = json.loads(tokenizer.to_str())["model"]["vocab"]
    special, trained = vocab[:n_special], {piece: round(score, 1) for piece, score in vocab[n_special:]}
    best = max(trained.values())
    added = [piece for piece in TEMPLATE_PIECES if piece not in trained]
    overflow = len(special) + len(trained) + len(added) - vocab_size
    if overflow > 0:
        multi_char = sorted((score, piece) for piece, score in trained.items()
                            if len(piece.lstrip(METASPACE)) > 1 and piece not in TEMPLATE_PIECES)
        for _, piece in multi_char[:overflow]:
            del trained[piece]
    trained.update(dict.fromkeys(TEMPLATE_PIECES, best))
    pieces = sorted(trained.items())
    return Unigram([tuple(entry) for entry in special] + pieces, unk_id=SPECIAL_TOKENS.index("<unk>"))


def _training_texts(texts: Sequence[str]) -> Iterator[str]:
    """The texts, then each word of the answer options in a short line of its own, repeated: every prompt lists its
    options, so an option word should be one piece or a few."""
    yield from texts
    option_words = sorted({word for text in texts if is_option(text) for word in text.split()})
    yield from [f"{OPTION_PREFIX}{word}, {word}." for word in option_words] * OPTION_WEIGHT

"""The tiny preset's tokenizer: options and prompts never hit `<unk>`, the template's words are one piece each,
case is kept, T5's special ids."""

import dataclasses

from jumplora.data.encode import prompt_source
from jumplora.data.types import TaskSpec
from jumplora.tiny.tokenizer import build_tokenizer
from tests.tiny.conftest import INSTRUCTION, OPTIONS, PASSAGES, SMALL_MODEL, TEXTS


def test_options_and_prompt_scaffold_never_tokenise_to_unk(tiny):
    _, _, tokenizer = tiny
    for text in [*OPTIONS, prompt_source(TaskSpec("task", INSTRUCTION, tuple(OPTIONS)), PASSAGES[0])]:
        ids = tokenizer(text).input_ids
        assert tokenizer.unk_token_id not in ids, text
        assert ids[-1] == tokenizer.eos_token_id
        assert tokenizer.decode(ids, skip_special_tokens=True) == " ".join(text.split())


def test_tokenizer_is_case_sensitive_with_t5_special_ids(tiny):
    _, model, tokenizer = tiny
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id) == (0, 1)
    assert tokenizer("Good").input_ids != tokenizer("good").input_ids
    assert model.config.decoder_start_token_id == 0
    assert model.config.vocab_size == len(tokenizer)
    sentinel = tokenizer.convert_tokens_to_ids("<extra_id_0>")
    assert tokenizer.decode([sentinel, *tokenizer("Good").input_ids], skip_special_tokens=True) == "Good"


def scaffold_pieces(tokenizer) -> list[str]:
    """The pieces of an empty prompt with options "yes" and "no", less those of the options."""
    source = prompt_source(TaskSpec("task", "", ("yes", "no")), "")
    pieces = tokenizer.convert_ids_to_tokens(tokenizer(source, add_special_tokens=False).input_ids)
    return [piece for piece in pieces if piece not in tokenizer.tokenize("yes no")]


# Written out by hand: "Task Instruction: \nOptions: yes | no\nText: \nAnswer:"
SCAFFOLD = ["▁Task", "▁Instruction", ":", "▁Options", ":", "▁|", "▁Text", ":", "▁Answer", ":"]


def test_the_prompt_templates_words_are_one_piece_each(tiny):
    _, _, tokenizer = tiny
    assert scaffold_pieces(tokenizer) == SCAFFOLD


def test_a_full_vocabulary_makes_room_for_the_templates_words():
    # The texts alone fill 150 entries; the template's 6 words replace 6 of the trained pieces.
    tokenizer = build_tokenizer(TEXTS, dataclasses.replace(SMALL_MODEL, vocab_size=150))
    assert len(tokenizer) == 150
    assert scaffold_pieces(tokenizer) == SCAFFOLD

"""The prompt is the authors' template (SPEC §3), written out here by hand; the encoder tokenises it piecewise and
cuts only the example text."""

import pytest

from jumplora.data.encode import PromptEncoder, prompt_source
from jumplora.data.types import Example, TaskSpec
from jumplora.tiny import TinyModelConfig
from jumplora.tiny.tokenizer import build_tokenizer

# instructions and options copied from CL_Benchmark's tasks.json; every instruction but COPA's (empty) ends in "\n"
AMAZON = TaskSpec(
    "amazon",
    "What is the sentiment of the following paragraph? Choose one from the option.\n",
    ("very negative", "negative", "neutral", "positive", "very positive"),
)
MNLI = TaskSpec(
    "mnli",
    'What is the logical relationship between the "sentence 1" and the "sentence 2"? Choose one from the option.\n',
    ("neutral", "entailment", "contradiction"),
)
COPA = TaskSpec("copa", "", ("A", "B"))

CASES = [  # (spec, example, the whole source as the authors' make_base_prompt writes it, `</s>` aside)
    (
        AMAZON,
        Example("Title: Extremely boring and dull!!!\nText: I was excited to try this but I wasted my money.\n",
                "negative"),
        "Task Instruction: What is the sentiment of the following paragraph? Choose one from the option.\n\n"
        "Options: very negative | negative | neutral | positive | very positive\n"
        "Text: Title: Extremely boring and dull!!!\nText: I was excited to try this but I wasted my money.\n\n"
        "Answer:",
    ),
    (
        MNLI,
        Example("sentence 1: There was no further sign of life.\nsentence 2: Everyone was hiding. ", "neutral"),
        'Task Instruction: What is the logical relationship between the "sentence 1" and the "sentence 2"? '
        "Choose one from the option.\n\n"
        "Options: neutral | entailment | contradiction\n"
        "Text: sentence 1: There was no further sign of life.\nsentence 2: Everyone was hiding. \n"
        "Answer:",
    ),
    (
        COPA,
        Example('Which sentence is the effect of "I ran the ice cube under warm water."? Choose one between A and '
                "B.\nA: The ice cube stuck to my fingers.\nB: The ice cube vanished.", "B"),
        "Task Instruction: \n"
        "Options: A | B\n"
        'Text: Which sentence is the effect of "I ran the ice cube under warm water."? Choose one between A and '
        "B.\nA: The ice cube stuck to my fingers.\nB: The ice cube vanished.\n"
        "Answer:",
    ),
]
IDS = ["amazon", "mnli", "copa"]


def pieces(source: str) -> tuple[str, str, str]:
    """The hand-written source cut where the encoder cuts it: up to the first "\\nText: ", the text, "\\nAnswer:"."""
    cut = source.index("\nText: ") + len("\nText: ")
    assert source.endswith("\nAnswer:")
    return source[:cut], source[cut : -len("\nAnswer:")], "\nAnswer:"


@pytest.fixture(scope="module")
def tokenizer():
    """The tiny preset's kind of tokenizer (Unigram, Metaspace, whitespace collapsed), over these prompts."""
    texts = [source for _, _, source in CASES] * 5
    return build_tokenizer(texts, TinyModelConfig(vocab_size=400, num_sentinels=2))


@pytest.mark.parametrize(("spec", "example", "source"), CASES, ids=IDS)
def test_the_source_is_the_authors_template(spec, example, source):
    assert prompt_source(spec, example.text) == source
    assert pieces(source)[1] == example.text


@pytest.mark.parametrize(("spec", "example", "source"), CASES, ids=IDS)
def test_the_encoder_gives_the_ids_of_the_handwritten_source_piecewise_then_eos(tokenizer, spec, example, source):
    def ids(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    encoded = PromptEncoder(tokenizer).encode(spec, example)
    eos = tokenizer.eos_token_id
    assert list(encoded.input_ids) == [id_ for piece in pieces(source) for id_ in ids(piece)] + [eos]
    assert list(encoded.input_ids) == tokenizer(source)["input_ids"]  # whitespace-splitting: piecewise == whole
    assert list(encoded.label_ids) == [*ids(example.label), eos]
    assert tokenizer.unk_token_id not in encoded.input_ids


@pytest.mark.parametrize(("spec", "example", "source"), CASES, ids=IDS)
def test_truncation_cuts_only_the_text_and_keeps_answer(tokenizer, spec, example, source):
    def ids(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    prefix, text, suffix = (ids(piece) for piece in pieces(source))
    eos = tokenizer.eos_token_id
    assert len(text) > 5
    full = PromptEncoder(tokenizer).source_length(spec, example.text)
    assert full == len(prefix) + len(text) + len(suffix) + 1
    for kept in (5, 1, 0):
        encoder = PromptEncoder(tokenizer, max_source_tokens=len(prefix) + kept + len(suffix) + 1)
        encoded = encoder.encode(spec, example)
        assert list(encoded.input_ids) == prefix + text[:kept] + suffix + [eos]
        assert tokenizer.decode(encoded.input_ids, skip_special_tokens=True).endswith("Answer:")
        assert encoder.source_length(spec, example.text) == full


def test_one_encoder_gives_two_specs_of_the_same_name_their_own_prompt(tokenizer):
    # The tiny preset's pre-training asks prompts whose options change from one pair to the next.
    encoder = PromptEncoder(tokenizer)
    example = Example("Text: a b", "A")
    for spec in (COPA, TaskSpec("copa", "", ("B", "A", "C"))):
        expected = tokenizer(prompt_source(spec, example.text))["input_ids"]
        assert list(encoder.encode(spec, example).input_ids) == expected

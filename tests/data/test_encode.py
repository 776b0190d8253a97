"""The prompt is the authors' template (SPEC §3), written out here by hand; the encoder tokenises it piecewise and
cuts only the example text."""

import pytest

from jumplora.data.encode import PromptEncoder, TokenizerFile, prompt_source
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


def test_a_saved_tokenizer_read_without_transformers_counts_the_same_tokens(tokenizer, tmp_path):
    """`TokenizerFile` (a plan's token counts, no torch) against the transformers tokenizer it was saved from."""
    tokenizer.save_pretrained(tmp_path)
    plain = TokenizerFile(tmp_path)
    assert plain.eos_token_id == tokenizer.eos_token_id and plain.eos_token_id is not None
    for spec, example, source in CASES:
        for special in (False, True):
            assert plain(source, special)["input_ids"] == tokenizer(source, add_special_tokens=special)["input_ids"]
        assert PromptEncoder(plain).source_length(spec, example.text) == \
            PromptEncoder(tokenizer).source_length(spec, example.text)


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


# ------------------------------------------------------------------------------------------------ causal models


@pytest.mark.parametrize(("spec", "example", "source"), CASES, ids=IDS)
def test_a_causal_prompt_is_the_same_source_without_eos_and_the_answer_follows_it(tokenizer, spec, example, source):
    def ids(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    encoded = PromptEncoder(tokenizer, causal=True).encode(spec, example)
    assert list(encoded.input_ids) == [id_ for piece in pieces(source) for id_ in ids(piece)]
    assert list(encoded.label_ids) == [*ids(example.label), tokenizer.eos_token_id]
    prefix, text, suffix = (ids(piece) for piece in pieces(source))
    encoder = PromptEncoder(tokenizer, max_source_tokens=len(prefix) + 2 + len(suffix), causal=True)
    assert list(encoder.encode(spec, example).input_ids) == prefix + text[:2] + suffix  # only the text is cut


def test_a_causal_prompt_starts_with_the_bos_its_tokenizer_adds(tokenizer):
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())  # a copy: the fixture's stays as it is
    bos = tokenizer.convert_tokens_to_ids("<extra_id_0>")  # a stand-in BOS, put first as Llama's tokenizer does
    backend.post_processor = processors.TemplateProcessing(single="<extra_id_0> $A", special_tokens=[("<extra_id_0>",
                                                                                                       bos)])
    with_bos = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>")
    spec, example, source = CASES[0]
    encoded = PromptEncoder(with_bos, causal=True).encode(spec, example)
    assert list(encoded.input_ids) == [bos, *with_bos(source, add_special_tokens=False)["input_ids"]]
    assert PromptEncoder(with_bos, causal=True).source_length(spec, example.text) == len(encoded.input_ids)


def test_a_causal_answer_takes_the_ids_it_has_after_the_prompt():
    """A byte-level BPE (GPT-2, Llama 3, Qwen) writes the space into the answer's first token: " negative" is
    "Ġnegative", not "negative"."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator([source + " negative" for _, _, source in CASES] * 20,
                            trainers.BpeTrainer(vocab_size=400, special_tokens=["<|end|>"],
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|end|>")
    spec, example, _ = CASES[0]
    encoded = PromptEncoder(tok, causal=True).encode(spec, example)
    answer = tok(" negative", add_special_tokens=False)["input_ids"]
    assert answer != tok("negative", add_special_tokens=False)["input_ids"]
    assert list(encoded.label_ids) == [*answer, tok.eos_token_id]
    assert tok.decode(encoded.input_ids + encoded.label_ids[:-1]).endswith("\nAnswer: negative")


def test_causal_batches_line_the_labels_up_with_the_positions_that_predict_them():
    from jumplora.data.encode import Encoded, collate, prompt_batch

    examples = [Encoded((5, 6, 7), (8, 1), "x"), Encoded((5,), (9, 10, 1), "y")]
    causal = collate(examples, pad_id=0, causal=True)
    assert causal["input_ids"].tolist() == [[5, 6, 7, 8], [5, 9, 10, 0]]  # prompt + label[:-1], right-padded
    assert causal["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert causal["label_positions"].tolist() == [[2, 3, 0], [0, 1, 2]]  # 7 predicts 8, 8 predicts </s>; 5 → 9 ...
    assert causal["labels"].tolist() == [[8, 1, -100], [9, 10, 1]]
    seq2seq = collate(examples, pad_id=0)
    assert seq2seq["input_ids"].tolist() == [[5, 6, 7], [5, 0, 0]]
    assert seq2seq["labels"].tolist() == [[8, 1, -100], [9, 10, 1]]
    assert set(seq2seq) == {"input_ids", "attention_mask", "labels"}
    left = prompt_batch(examples, pad_id=0, causal=True)  # generation: the next token follows every prompt
    assert left["input_ids"].tolist() == [[5, 6, 7], [0, 0, 5]]
    assert left["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert prompt_batch(examples, pad_id=0)["input_ids"].tolist() == [[5, 6, 7], [5, 0, 0]]

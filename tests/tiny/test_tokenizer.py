"""The tiny preset's tokenizer: options and prompts never hit `<unk>`, case is kept, T5's special ids."""

from jumplora.data.encode import prompt_source
from jumplora.data.types import TaskSpec
from tests.tiny.conftest import INSTRUCTION, OPTIONS, PASSAGES


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

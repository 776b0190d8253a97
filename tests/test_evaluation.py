"""Fast (teacher-forced) exact match gives exactly the flags of `generate`, on a Unigram tokenizer with case
variants and alternative tokenisations of the same answer, over a T5 and a Llama-style causal decoder, each trained
to emit every kind of answer."""

import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import Unigram
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

import jumplora.evaluation as evaluation
from jumplora.data.encode import Encoded, collate, length_sorted_batches
from jumplora.evaluation import exact_match_flags
from jumplora.losses import summed_label_ce

N_IDS = 48  # one id word per example, so the model can memorise its target
WORDS = ["review", "good", "bad", "movie", "film", "plot", "great", "awful", "fine", "dull", "story", "cast"]
ANSWER_PIECES = [  # whole words score best, so the tokenizer's own ids are the one-piece ones
    ("▁positive", -2.0), ("▁Positive", -2.0), ("▁POSITIVE", -2.0), ("▁pos", -4.0), ("itive", -4.0),
    ("▁negative", -2.0), ("▁Negative", -2.0), ("▁neg", -4.0), ("ative", -4.0), ("▁very", -2.0), ("▁Very", -2.0),
]


def unigram_tokenizer() -> PreTrainedTokenizerFast:
    """SentencePiece-style: Metaspace pieces, case-sensitive, several tokenisations of each answer."""
    letters = [(c, -10.0) for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"] + [("▁", -8.0)]
    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), *ANSWER_PIECES, *[(f"▁{w}", -3.0) for w in WORDS],
             *[(f"▁x{i}", -3.0) for i in range(N_IDS)], *letters]
    model = Tokenizer(Unigram(vocab, unk_id=2))
    model.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(r"\s+"), " "),
                                             normalizers.Strip()])
    model.pre_tokenizer = pre_tokenizers.Metaspace()
    model.decoder = decoders.Metaspace()
    return PreTrainedTokenizerFast(tokenizer_object=model, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def answer_kinds(tok) -> dict[str, tuple[str, list[int], bool]]:
    """label, the token ids the model is trained to emit (then </s>), and whether greedy output matches."""
    ids = tok.convert_tokens_to_ids
    return {
        "exact": ("positive", ids(["▁positive"]), True),
        "exact two words": ("very negative", ids(["▁very", "▁negative"]), True),
        "other case": ("positive", ids(["▁Positive"]), True),
        "upper case": ("positive", ids(["▁POSITIVE"]), True),
        "other tokenisation": ("positive", ids(["▁pos", "itive"]), True),
        "other tokenisation and case": ("very negative", ids(["▁Very", "▁neg", "ative"]), True),
        "letters": ("negative", ids(["▁neg", *"ative"]), True),
        "prefix then stop": ("positive", ids(["▁pos"]), False),
        "wrong": ("positive", ids(["▁negative"]), False),
        "wrong after a shared piece": ("very negative", ids(["▁very", "▁positive"]), False),
        "longer": ("negative", ids(["▁negative", "▁negative"]), False),
        "empty": ("negative", [], False),
    }


def train_memoriser(tok, examples: list[tuple[list[int], list[int]]], causal: bool, steps: int = 600):
    """A tiny T5, or Llama-style decoder, trained (full-batch AdamW, CE on the answer) until it emits every example's
    target under greedy decoding."""
    torch.manual_seed(0)
    if causal:
        model = LlamaForCausalLM(LlamaConfig(
            vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=4, head_dim=16, pad_token_id=0, eos_token_id=1, bos_token_id=None,
            max_position_embeddings=64))
    else:
        model = T5ForConditionalGeneration(T5Config(
            vocab_size=len(tok), d_model=64, d_kv=16, num_heads=4, d_ff=128, num_layers=2, num_decoder_layers=2,
            pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, dropout_rate=0.0))
    batch = collate([Encoded(tuple(s), tuple(t), "") for s, t in examples], 0, causal=causal)
    n_tokens = sum(len(t) for _, t in examples)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        loss = summed_label_ce(model, batch) / n_tokens
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss.item() < 1e-2:
            break
    return model.eval()


@pytest.fixture(scope="module", params=["t5", "causal"])
def trained(request):
    """The tokenizer, a model trained to emit each kind of answer, and the examples as the encoder writes them (a
    seq2seq source ends in </s>; a causal prompt does not, its answer follows)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is faster, above all on a loaded machine
    tok = unigram_tokenizer()
    causal = request.param == "causal"
    generator = torch.Generator().manual_seed(0)
    word_ids = tok.convert_tokens_to_ids([f"▁{w}" for w in WORDS])
    encoded, targets = [], []
    for _ in range(3):  # three inputs per kind, of different lengths (so batches mix lengths and padding)
        for label, emitted, _ in answer_kinds(tok).values():
            length = int(torch.randint(3, 14, (1,), generator=generator))
            source = [word_ids[int(i)] for i in torch.randint(0, len(word_ids), (length,), generator=generator)]
            source = [tok.convert_tokens_to_ids(f"▁x{len(encoded)}"), *source] + ([] if causal else [tok.eos_token_id])
            label_ids = tuple(tok(label, add_special_tokens=False)["input_ids"]) + (tok.eos_token_id,)
            encoded.append(Encoded(tuple(source), label_ids, label))
            targets.append((source, emitted + [tok.eos_token_id]))
    model = train_memoriser(tok, targets, causal)
    yield tok, model, encoded
    torch.set_num_threads(threads)


def test_the_tokenizer_has_case_variants_and_alternative_tokenisations():
    tok = unigram_tokenizer()
    assert tok.tokenize("positive") == ["▁positive"]
    for pieces in (["▁pos", "itive"], ["▁Positive"], ["▁", *"positive"]):
        assert tok.decode(tok.convert_tokens_to_ids(pieces)).strip().lower() == "positive"


def test_fast_equals_generate_and_exercises_every_route(trained, monkeypatch):
    tok, model, encoded = trained
    kinds = list(answer_kinds(tok).values()) * 3
    verdicts: list[bool | None] = []
    real = evaluation._teacher_forced_verdicts

    def recording(*args, **kwargs):
        out = real(*args, **kwargs)
        verdicts.extend(out)
        return out

    monkeypatch.setattr(evaluation, "_teacher_forced_verdicts", recording)
    fast = exact_match_flags(model, tok, encoded, batch_size=8, progress=False, mode="fast")
    monkeypatch.undo()
    slow = exact_match_flags(model, tok, encoded, batch_size=8, progress=False, mode="generate")
    assert fast == slow
    # the model learned to emit each kind of answer, so the flags are the intended ones (non-trivial accuracy)
    assert fast == [expected for _, _, expected in kinds]
    # all routes were taken: decided by the teacher-forced pass (both ways) and handed to generate (both ways)
    assert True in verdicts and False in verdicts and None in verdicts
    by_row = dict(zip((i for b in length_sorted_batches(encoded, 8) for i in b), verdicts, strict=True))
    assert any(by_row[i] is None and fast[i] for i in by_row)  # another case / tokenisation of the label
    assert any(by_row[i] is None and not fast[i] for i in by_row)  # a prefix of the label, then stop


def test_flags_follow_input_order_whatever_the_batch_size(trained):
    tok, model, encoded = trained
    one_by_one = [exact_match_flags(model, tok, [e], batch_size=1, progress=False, mode="generate")[0]
                  for e in encoded]
    for batch_size in (1, 5, 64):
        assert exact_match_flags(model, tok, encoded, batch_size=batch_size, progress=False) == one_by_one


def test_batches_are_sorted_by_source_length(trained):
    _, _, encoded = trained
    batches = length_sorted_batches(encoded, 8)
    lengths = [len(encoded[i].input_ids) for b in batches for i in b]
    assert lengths == sorted(lengths)
    assert sorted(i for b in batches for i in b) == list(range(len(encoded)))
    assert all(len(b) == 8 for b in batches[:-1])


def test_unknown_mode_is_refused(trained):
    tok, model, encoded = trained
    with pytest.raises(ValueError, match="eval mode"):
        exact_match_flags(model, tok, encoded, progress=False, mode="beam")


def test_fast_equals_generate_in_bf16(trained):
    """Both routes under bf16 autocast (CPU autocast here; the run uses bf16 on CUDA only), the frozen linears cast
    once: the fast route's tie margin follows the bf16 logits, and the flags are generate's."""
    tok, model, encoded = trained
    fast = exact_match_flags(model, tok, encoded, batch_size=8, progress=False, mode="fast", precision="bf16")
    slow = exact_match_flags(model, tok, encoded, batch_size=8, progress=False, mode="generate", precision="bf16")
    assert fast == slow
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the fp32 weights are back

"""The two model families (seq2seq, such as T5; decoder-only causal LMs, such as Llama) and the facts about them that
the adapters, the options and the loop share. A leaf: it imports no model code, so asking which layers a family
adapts does not load transformers."""

from __future__ import annotations

SEQ2SEQ = "seq2seq"
CAUSAL = "causal"
# the adapted linear layers when --target-modules is left out: the attention's query and value (SPEC §3 for T5;
# the same two projections under the names of Llama, Mistral, Qwen and Phi-3)
DEFAULT_TARGET_MODULES = {SEQ2SEQ: ("q", "v"), CAUSAL: ("q_proj", "v_proj")}


def family_of(model_or_config) -> str:
    """`seq2seq` for an encoder-decoder checkpoint, else `causal` (from `config.is_encoder_decoder`)."""
    config = getattr(model_or_config, "config", model_or_config)
    return SEQ2SEQ if config.is_encoder_decoder else CAUSAL


def is_causal(model) -> bool:
    return family_of(model) == CAUSAL

"""Training-step time of JumpLoRA vs plain PEFT LoRA on the same model and batch, and evaluation time.

Random-weight T5 models built from a config (no hub access). Prints a table (min / median / max over repeats).
    python bench/step_and_eval.py [--shape small|base] [--batch 8] [--source-len 128] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import T5Config, T5ForConditionalGeneration

from jumplora.adapters import JumpLoraAdapter, JumpLoraConfig, PeftLoraAdapter, PlainLoraConfig
from jumplora.evaluation import MAX_NEW_TOKENS

SHAPES = {
    "small": dict(d_model=512, d_kv=64, num_heads=8, d_ff=2048, num_layers=6, num_decoder_layers=6),
    "base": dict(d_model=768, d_kv=64, num_heads=12, d_ff=3072, num_layers=12, num_decoder_layers=12),
}


def build_model(shape: str) -> T5ForConditionalGeneration:
    torch.manual_seed(0)
    config = T5Config(vocab_size=32128, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, dropout_rate=0.0,
                      **SHAPES[shape])
    return T5ForConditionalGeneration(config).requires_grad_(False)


def make_batch(batch: int, source_len: int, target_len: int = 4) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(2, 32000, (batch, source_len), generator=generator)
    labels = torch.randint(2, 32000, (batch, target_len), generator=generator)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}


def time_steps(kind: str, shape: str, batch: dict, repeats: int, total_steps: int = 10) -> list[float]:
    model = build_model(shape).train()
    if kind == "jumplora":
        adapter = JumpLoraAdapter(model, JumpLoraConfig(), total_steps)
    else:
        adapter = PeftLoraAdapter(model, PlainLoraConfig(dropout=0.0), total_steps)
    optimizer = torch.optim.AdamW(adapter.trainable_parameters(), lr=1e-3)
    # Warm-up step at γ = 0, then τ is set by count and every timed step runs at γ = 1 (the sparse route).
    times = []
    for step in range(repeats + 1):
        adapter.before_step(1 if step == 0 else total_steps)
        start = time.perf_counter()
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
        if step == 0:
            adapter.after_step(getattr(adapter, "s_start", 1))
    return times[1:]


def time_generate(shape: str, batch: dict, repeats: int) -> list[float]:
    model = build_model(shape).eval()
    times = []
    with torch.no_grad():
        for _ in range(repeats):
            start = time.perf_counter()
            model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           max_new_tokens=MAX_NEW_TOKENS, do_sample=False, num_beams=1)
            times.append(time.perf_counter() - start)
    return times


def row(name: str, times: list[float]) -> str:
    return f"{name:<28} {min(times):8.3f} {statistics.median(times):8.3f} {max(times):8.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="small", choices=list(SHAPES))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--source-len", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    batch = make_batch(args.batch, args.source_len)
    lora = time_steps("lora", args.shape, batch, args.repeats)
    jump = time_steps("jumplora", args.shape, batch, args.repeats)
    evaluation = time_generate(args.shape, batch, args.repeats)
    print(f"T5-{args.shape} (random weights), batch {args.batch} × {args.source_len} tokens, {args.repeats} repeats")
    print(f"{'seconds':<28} {'min':>8} {'median':>8} {'max':>8}")
    print(row("train step, PEFT LoRA", lora))
    print(row("train step, JumpLoRA (γ>0)", jump))
    print(row("greedy eval (≤8 tokens)", evaluation))
    print(f"JumpLoRA / LoRA step-time ratio (median): {statistics.median(jump) / statistics.median(lora):.2f}")


if __name__ == "__main__":
    main()

"""The benchmark suite (`make bench`): prints a table and writes JSON; every figure is min / median / max over repeats.

Sections, each run in its own subprocess (so its peak RSS is its own):
- step:  training-step time, JumpLoRA (default route: global τ, no dropout, γ = 1) vs plain PEFT LoRA (dropout 0),
         on a T5-base-shaped model with random weights (d_model 768, 12+12 layers, d_ff 3072, 12 heads); the two
         models step alternately, so both see the same machine load; the ratio is taken per pair.
- step-causal: the same on a Llama-shaped decoder of T5-base's size (random weights, ~220 M parameters: hidden 768,
         24 layers, SwiGLU 2048, 12 heads, vocabulary 32000), adapters on q_proj/v_proj, each example a prompt of
         --base-len tokens then a 4-token answer, the loss on the answer (as `train_task` computes it).
- tiny:  the tiny preset built from the real data (order 1 tasks): examples/s of training one whole task (order 1's
         smallest by default), then the evaluation time of the trained, merged model on every order-1 task's test
         split, fast vs generate, with both accuracies and the encoder's share of the time.
- large: peak RSS and step time of JumpLoRA training on a T5-large-shaped model (24+24 layers, d_model 1024,
         d_ff 4096, 16 heads, random weights) at batch 2 × 128 tokens.
- stacked: a stage of the grid's 6 λ as one stack (`continual.run_task_group`) against the same 6 one after another
         and one λ alone, side by side; the step time and peak memory of a stack of K = 1, 2, 3, 6
         (`bench/stacked.py`): stage 2 of order 1 on the tiny preset (the synthetic benchmark, as `make demo`), then
         the T5-base shape with random weights and short synthetic examples.
- search: the λ grid against the halving search (`grid_lambda.py --search`) on the synthetic benchmark with the tiny
         preset, order 1 and LS order 4 cut to 6 tasks, 3 seeds: λ chosen, final OA / BWT / FWT, optimizer steps,
         evaluated examples, wall time (`bench/search_modes.py`). Hours on 2 CPUs: not in the default sections.

    python bench/run_all.py [--quick] [--repeats N] [--sections step,tiny,large,stacked] [--out results.json]

Not part of `make test`. The machine's load (`os.getloadavg`) is recorded next to the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import search_modes
import stacked
import torch

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "CL_Benchmark"
SECTIONS = ("step", "step-causal", "tiny", "large", "stacked", "search")
DEFAULT_SECTIONS = ("step", "step-causal", "tiny", "large", "stacked")
T5_BASE = dict(d_model=768, d_kv=64, num_heads=12, d_ff=3072, num_layers=12, num_decoder_layers=12)
LLAMA_T5_BASE_SIZED = dict(hidden_size=768, num_hidden_layers=24, intermediate_size=2048, num_attention_heads=12,
                           num_key_value_heads=12, head_dim=64)
T5_LARGE = dict(d_model=1024, d_kv=64, num_heads=16, d_ff=4096, num_layers=24, num_decoder_layers=24)
GIB = 1024**3
TARGETS = {"step_ratio": 1.15, "eval_speedup": 2.0, "large_rss_gib": 24.0}


def stats(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "values": values}


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


# --------------------------------------------------------------------------------------------------------- models


def random_t5(shape: dict):
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    config = T5Config(vocab_size=32128, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, dropout_rate=0.0,
                      **shape)
    return T5ForConditionalGeneration(config).requires_grad_(False).train()


def random_llama(shape: dict):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, pad_token_id=0, eos_token_id=1, bos_token_id=None, **shape)
    return LlamaForCausalLM(config).requires_grad_(False).train()


def random_causal_batch(batch: int, prompt_len: int, target_len: int = 4) -> dict[str, torch.Tensor]:
    """Prompts of `prompt_len` tokens, each followed by a `target_len`-token answer, collated as for training."""
    from jumplora.data.encode import Encoded, collate

    generator = torch.Generator().manual_seed(0)
    examples = [Encoded(tuple(torch.randint(2, 32000, (prompt_len,), generator=generator).tolist()),
                        tuple(torch.randint(2, 32000, (target_len,), generator=generator).tolist()), "")
                for _ in range(batch)]
    return collate(examples, 0, causal=True)


def random_batch(batch: int, source_len: int, target_len: int = 4) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(2, 32000, (batch, source_len), generator=generator)
    labels = torch.randint(2, 32000, (batch, target_len), generator=generator)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}


class Stepper:
    """One adapter on one model, stepped as `train_task` steps: summed label CE, backward, clip, AdamW."""

    TOTAL_STEPS = 100

    def __init__(self, kind: str, model, batch: dict[str, torch.Tensor]) -> None:
        from jumplora.adapters import JUMPLORA, LORA
        from jumplora.config import RunConfig

        self.model, self.batch = model, batch
        adapter_kind = JUMPLORA if kind == "jumplora" else LORA  # the model family's default targets
        self.adapter = adapter_kind.build(model, RunConfig(lora_dropout=0.0), self.TOTAL_STEPS)
        self.params = self.adapter.trainable_parameters(0)
        self.optimizer = torch.optim.AdamW(self.params, lr=1e-3)
        # warm-up step in the dense phase (γ = 0), then τ by count, then every timed step at γ = 1 (the sparse route)
        self.adapter.before_step(1)
        self.step()
        self.adapter.after_step(getattr(self.adapter, "s_start", 1))
        self.adapter.before_step(self.TOTAL_STEPS)

    def step(self) -> tuple[float, float]:
        """(wall seconds, CPU seconds of this process) of one optimizer step."""
        from jumplora.losses import summed_label_ce

        start, cpu = time.perf_counter(), time.process_time()
        summed_label_ce(self.model, self.batch).backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start, time.process_time() - cpu


# ------------------------------------------------------------------------------------------------------- sections


def section_step(args, causal: bool = False) -> dict:
    """JumpLoRA vs LoRA steps on the T5-base shape (or, `causal`, the Llama-shaped decoder of its size)."""
    if causal:
        batch, shape, build = random_causal_batch(args.base_batch, args.base_len), "llama", random_llama
        size = LLAMA_T5_BASE_SIZED
    else:
        batch, shape, build, size = random_batch(args.base_batch, args.base_len), "t5-base", random_t5, T5_BASE
    base = build(size)
    parameters_m = sum(p.numel() for p in base.parameters()) / 1e6
    lora = Stepper("lora", base, batch)
    jump = Stepper("jumplora", build(size), batch)
    lora_times, jump_times = [], []
    for _ in range(args.repeats):  # alternate, so both see the same load
        lora_times.append(lora.step())
        jump_times.append(jump.step())
    wall = {"lora": [t[0] for t in lora_times], "jump": [t[0] for t in jump_times]}
    cpu = {"lora": [t[1] for t in lora_times], "jump": [t[1] for t in jump_times]}
    return {"shape": shape, "batch": [args.base_batch, args.base_len], "threads": torch.get_num_threads(),
            "parameters_m": parameters_m,
            "lora_s": stats(wall["lora"]), "jumplora_s": stats(wall["jump"]),
            "ratio": stats([j / lo for j, lo in zip(wall["jump"], wall["lora"], strict=True)]),
            "lora_cpu_s": stats(cpu["lora"]), "jumplora_cpu_s": stats(cpu["jump"]),
            "cpu_ratio": stats([j / lo for j, lo in zip(cpu["jump"], cpu["lora"], strict=True)]),
            "peak_rss_gib": peak_rss_bytes() / GIB}


def section_large(args) -> dict:
    model = random_t5(T5_LARGE)
    params_gib = sum(p.numel() * p.element_size() for p in model.parameters()) / GIB
    jump = Stepper("jumplora", model, random_batch(args.large_batch, args.large_len))
    times = [jump.step() for _ in range(args.large_repeats)]
    return {"shape": "t5-large", "batch": [args.large_batch, args.large_len], "parameters_gib": params_gib,
            "jumplora_s": stats([t[0] for t in times]), "jumplora_cpu_s": stats([t[1] for t in times]),
            "peak_rss_gib": peak_rss_bytes() / GIB}


def _timed_encoder(model, tokenizer, encoded, batch_size: int) -> float:
    from jumplora.data.encode import collate, length_sorted_batches

    start = time.perf_counter()
    with torch.no_grad():
        for idx in length_sorted_batches(encoded, batch_size):
            batch = collate([encoded[i] for i in idx], tokenizer.pad_token_id)
            model.encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    return time.perf_counter() - start


def section_tiny(args) -> dict:
    import jumplora.evaluation as evaluation
    from jumplora.config import RunConfig
    from jumplora.continual import prepare
    from jumplora.training import train_task

    config = RunConfig(order=1, method="jumplora+inclora", data_dir=str(args.data_dir), device="cpu", model=args.model,
                       max_train_per_task=args.task_train, max_eval_per_task=args.eval_per_task)
    ws = prepare(config, args.cache_dir, progress=False)
    first = args.task or min(ws.tasks, key=lambda t: len(ws.encoded[t]["train"]))  # default: order 1's smallest
    train = ws.encoded[first]["train"]
    initial = {k: v.detach().clone() for k, v in ws.model.state_dict().items()}
    train_times = []
    for _ in range(args.task_repeats):
        ws.model.load_state_dict(initial)
        start = time.perf_counter()
        trained = train_task(ws.model, train, task_name=first, task_seed=0, lams=[0.0], regularisers=[None],
                             config=config, pad_id=ws.tokenizer.pad_token_id, device=ws.device, progress=False)
        train_times.append(time.perf_counter() - start)
    trained.adapter.merge(0)
    model, tok = ws.model, ws.tokenizer  # trained on the first task and merged: a plain model
    sets = {task: ws.encoded[task]["test"] for task in ws.tasks}
    lengths = sorted(len(e.input_ids) for examples in sets.values() for e in examples)

    undecided = []
    real = evaluation._teacher_forced_verdicts

    def counting(*a, **k):
        verdicts = real(*a, **k)
        undecided.append(sum(v is None for v in verdicts))
        return verdicts

    times = {"fast": [], "generate": [], "encoder": []}
    flags = {}
    for _ in range(args.repeats):
        for mode in ("fast", "generate"):
            evaluation._teacher_forced_verdicts = counting if mode == "fast" else real
            undecided.clear()
            start = time.perf_counter()
            flags[mode] = {t: evaluation.exact_match_flags(model, tok, enc, batch_size=config.eval_batch_size,
                                                           progress=False, mode=mode) for t, enc in sets.items()}
            times[mode].append(time.perf_counter() - start)
        evaluation._teacher_forced_verdicts = real
        times["encoder"].append(sum(_timed_encoder(model, tok, enc, config.eval_batch_size) for enc in sets.values()))
    accuracy = {mode: {t: sum(f) / len(f) for t, f in per_task.items()} for mode, per_task in flags.items()}
    n_eval = sum(len(e) for e in sets.values())
    return {
        "model": args.model, "task": first, "train_examples": len(train),
        "train_steps": -(-len(train) // config.batch_size),
        "train_s": stats(train_times), "train_examples_per_s": stats([len(train) / t for t in train_times]),
        "eval_examples": n_eval, "eval_tasks": list(sets),
        "source_tokens": {"min": lengths[0], "median": statistics.median(lengths), "max": lengths[-1]},
        "fast_s": stats(times["fast"]), "generate_s": stats(times["generate"]), "encoder_s": stats(times["encoder"]),
        "speedup": stats([g / f for f, g in zip(times["fast"], times["generate"], strict=True)]),
        "encoder_share_fast": stats([e / f for e, f in zip(times["encoder"], times["fast"], strict=True)]),
        "encoder_share_generate": stats([e / g for e, g in zip(times["encoder"], times["generate"], strict=True)]),
        "fast_examples_per_s": stats([n_eval / t for t in times["fast"]]),
        "decided_by_generate_in_fast": sum(undecided),
        "accuracy": accuracy, "identical_flags": flags["fast"] == flags["generate"],
        "peak_rss_gib": peak_rss_bytes() / GIB,
    }


def section_stacked(args) -> dict:
    """A stage's 6 λ as one stack, one after another, and one λ alone (`bench/stacked.py`): the tiny preset's stage
    2 of order 1, then the T5-base shape."""
    tiny = stacked.tiny_stage(args.cache_dir, None, train_examples=args.stacked_train,
                              eval_examples=args.stacked_eval, repeats=args.repeats)
    base = stacked.shape_stage(random_t5(T5_BASE), torch.device("cpu"), batch=args.stacked_batch,
                               steps=args.stacked_steps, source_tokens=args.stacked_len, repeats=args.repeats)
    return {"tiny": tiny, "t5-base": base}


RUNNERS = {"step": section_step, "step-causal": lambda args: section_step(args, causal=True), "tiny": section_tiny,
           "large": section_large, "stacked": section_stacked, "search": search_modes.run}


# ---------------------------------------------------------------------------------------------------------- report


def row(name: str, figure: dict, unit: str, scale: float = 1.0, fmt: str = "{:.3f}") -> str:
    cells = [fmt.format(figure[k] * scale) for k in ("min", "median", "max")]
    return f"{name:<52} {cells[0]:>10} {cells[1]:>10} {cells[2]:>10}  {unit}"


def report(results: dict) -> str:
    lines = [f"machine: {results['machine']}, load average (1/5/15 min) at start {results['load_start']}, "
             f"at end {results['load_end']}, repeats {results['repeats']}{' (quick)' if results['quick'] else ''}"]
    lines += [f"  section {name}: {s['wall_s']:.0f} s, load {s['load'][0]} → {s['load'][1]}"
              for name, s in results["sections"].items() if "load" in s]
    lines.append(f"{'figure':<52} {'min':>10} {'median':>10} {'max':>10}")
    step, causal, tiny, large, stack, search = (results["sections"].get(k) for k in SECTIONS)
    steps = [(name, section) for name, section in (("T5-base", step), ("Llama (T5-base size)", causal)) if section]
    for name, section in steps:
        b = "×".join(map(str, section["batch"]))
        lines += [row(f"{name} step, PEFT LoRA (batch {b})", section["lora_s"], "s"),
                  row(f"{name} step, JumpLoRA γ=1 (batch {b})", section["jumplora_s"], "s"),
                  row("  JumpLoRA / LoRA step time (per pair)", section["ratio"], "×", fmt="{:.2f}"),
                  row(f"{name} step CPU time, PEFT LoRA", section["lora_cpu_s"], "s"),
                  row(f"{name} step CPU time, JumpLoRA γ=1", section["jumplora_cpu_s"], "s"),
                  row("  JumpLoRA / LoRA step CPU time (per pair)", section["cpu_ratio"], "×", fmt="{:.2f}")]
    if tiny:
        lines += [row(f"tiny: train whole task {tiny['task']} ({tiny['train_examples']} ex.)", tiny["train_s"], "s"),
                  row("tiny: training throughput", tiny["train_examples_per_s"], "ex/s", fmt="{:.1f}"),
                  row(f"tiny: eval fast ({tiny['eval_examples']} test ex., 4 tasks)", tiny["fast_s"], "s"),
                  row("tiny: eval generate", tiny["generate_s"], "s"),
                  row("  generate / fast eval time (speed-up)", tiny["speedup"], "×", fmt="{:.2f}"),
                  row("  encoder share of fast eval time", tiny["encoder_share_fast"], "%", 100, "{:.0f}"),
                  row("  encoder share of generate eval time", tiny["encoder_share_generate"], "%", 100, "{:.0f}"),
                  row("  fast eval throughput", tiny["fast_examples_per_s"], "ex/s", fmt="{:.1f}")]
    if large:
        b = "×".join(map(str, large["batch"]))
        lines.append(row(f"T5-large step, JumpLoRA γ=1 (batch {b})", large["jumplora_s"], "s"))
        lines.append(row("T5-large step CPU time, JumpLoRA γ=1", large["jumplora_cpu_s"], "s"))
        lines.append(f"{'T5-large peak RSS':<52} {large['peak_rss_gib']:>32.2f}  GiB "
                     f"(parameters {large['parameters_gib']:.2f} GiB)")
    if stack:
        lines += stacked.lines("stacked, tiny preset", stack["tiny"])
        lines += stacked.lines("stacked, T5-base", stack["t5-base"])
    if search:
        lines += search_modes.report(search)
    lines.append("targets:")
    for name, section in steps:
        ratio, cpu_ratio = section["ratio"]["median"], section["cpu_ratio"]["median"]
        lines.append(f"  {name} JumpLoRA step ≤ {TARGETS['step_ratio']} × LoRA: median ratio {ratio:.2f} wall, "
                     f"{cpu_ratio:.2f} CPU time "
                     f"({'met' if ratio <= TARGETS['step_ratio'] else 'NOT met'} on wall time)")
    if tiny:
        speed, same = tiny["speedup"]["median"], tiny["identical_flags"]
        acc = {m: round(sum(a.values()) / len(a), 4) for m, a in tiny["accuracy"].items()}
        lines.append(f"  fast eval ≥ {TARGETS['eval_speedup']}× generate, same accuracy: {speed:.2f}×, "
                     f"identical flags {same}, mean accuracy fast {acc['fast']} / generate {acc['generate']}, "
                     f"{tiny['decided_by_generate_in_fast']} example(s) handed to generate "
                     f"({'met' if speed >= TARGETS['eval_speedup'] and same else 'NOT met'})")
    if stack:
        for name, section in (("tiny preset", stack["tiny"]), ("T5-base", stack["t5-base"])):
            ratio = section["stage"]["stack_over_one_by_one"]["median"]
            lines.append(f"  {name}: a stack of 6 not slower than the 6 one after another: median ratio {ratio:.2f} "
                         f"({'met' if ratio <= 1.0 else 'NOT met'})")
    if large:
        rss = large["peak_rss_gib"]
        lines.append(f"  T5-large JumpLoRA training in {TARGETS['large_rss_gib']:.0f} GiB: peak RSS {rss:.2f} GiB "
                     f"({'met' if rss < TARGETS['large_rss_gib'] else 'NOT met'})")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="few repeats and small sizes (a smoke run)")
    parser.add_argument("--repeats", type=int, default=None, help="repeats per figure (default 3, quick 2)")
    parser.add_argument("--sections", default=",".join(DEFAULT_SECTIONS),
                        help=f"comma-separated subset of {SECTIONS}")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench" / "results.json")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="CL_Benchmark folder (order 1 tasks)")
    parser.add_argument("--cache-dir", type=Path, default=ROOT / "runs" / "cache", help="tiny preset cache")
    parser.add_argument("--model", default="tiny", help="model of the tiny section: 'tiny' (built from --data-dir and "
                        "cached) or a saved model directory (e.g. another tiny preset)")
    parser.add_argument("--base-batch", type=int, default=None,
                        help="T5-base (and Llama) step batch (default 8, quick 4)")
    parser.add_argument("--base-len", type=int, default=128, help="source (Llama: prompt) tokens of the step batch")
    parser.add_argument("--large-batch", type=int, default=2)
    parser.add_argument("--large-len", type=int, default=128)
    parser.add_argument("--large-repeats", type=int, default=None, help="T5-large steps (default 3, quick 1)")
    parser.add_argument("--task-train", type=int, default=None,
                        help="cap on the whole task's training examples (default: none, quick 320)")
    parser.add_argument("--task", default=None, help="the whole task to train (default: order 1's smallest)")
    parser.add_argument("--task-repeats", type=int, default=None, help="whole-task trainings (default 2, quick 1)")
    parser.add_argument("--eval-per-task", type=int, default=None, help="test examples a task (default 250, quick 64)")
    parser.add_argument("--stacked-train", type=int, default=None,
                        help="stacked: the tiny stage's training examples (default 256: 8 steps; quick 96)")
    parser.add_argument("--stacked-eval", type=int, default=16, help="stacked: the tiny stage's dev examples a task")
    parser.add_argument("--stacked-batch", type=int, default=None, help="stacked: T5-base batch (default 4, quick 2)")
    parser.add_argument("--stacked-len", type=int, default=32, help="stacked: T5-base source tokens (± a quarter)")
    parser.add_argument("--stacked-steps", type=int, default=3, help="stacked: T5-base steps a task (N ≥ 3)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: torch's); 1 gives steadier CPU times on a shared machine")
    parser.add_argument("--search-seeds", type=lambda text: [int(v) for v in text.split(",")], default=[1, 2, 3],
                        help="search: seeds of each order")
    parser.add_argument("--search-train", type=int, default=1024, help="search: training examples a task")
    parser.add_argument("--search-modes", type=lambda text: text.split(","), default=list(search_modes.MODES),
                        help="search: grid,halving (both, the default) or one of them")
    parser.add_argument("--search-cpus", type=float, default=0.33,
                        help="search: CPUs of a trial (0.33: a stage's 6 λ at once on 2 CPUs)")
    parser.add_argument("--search-storage", type=Path, default=ROOT / "runs" / "bench" / "search",
                        help="search: the grids' storage (grids already there are not run again)")
    parser.add_argument("--combine", nargs="+", type=Path, default=None,
                        help="no runs: one table and JSON from the sections of earlier results files")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    quick = args.quick
    args.repeats = args.repeats or (2 if quick else 3)
    args.base_batch = args.base_batch or (4 if quick else 8)
    args.large_repeats = args.large_repeats or (1 if quick else 3)
    args.task_repeats = args.task_repeats or (1 if quick else 2)
    args.task_train = args.task_train or (320 if quick else None)
    args.eval_per_task = args.eval_per_task or (64 if quick else 250)
    args.stacked_train = args.stacked_train or (96 if quick else 256)
    args.stacked_batch = args.stacked_batch or (2 if quick else 4)

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.child:  # one section, in its own process
        args.child_out.write_text(json.dumps(RUNNERS[args.child](args)))
        return
    if args.combine:  # one table from the sections of earlier result files (later files win)
        results = json.loads(args.combine[0].read_text())
        for extra in args.combine[1:]:
            later = json.loads(extra.read_text())
            results["sections"].update(later["sections"])
            results["load_end"] = later["load_end"]
        finish(results, args.out)
        return

    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s) {', '.join(sorted(unknown))}; choose from {', '.join(SECTIONS)}")
    results = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
                          f"{torch.get_num_threads()} threads",
               "load_start": [round(v, 2) for v in os.getloadavg()], "repeats": args.repeats, "quick": quick,
               "sections": {}}
    for name in sections:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "section.json"
            start, load = time.perf_counter(), [round(v, 2) for v in os.getloadavg()]
            subprocess.run([sys.executable, __file__, *sys.argv[1:], "--child", name, "--child-out", str(out)],
                           check=True)
            results["sections"][name] = json.loads(out.read_text())
            results["sections"][name]["wall_s"] = time.perf_counter() - start
            results["sections"][name]["load"] = [load, [round(v, 2) for v in os.getloadavg()]]
        print(f"[bench] {name} done in {results['sections'][name]['wall_s']:.0f} s", file=sys.stderr)
    results["load_end"] = [round(v, 2) for v in os.getloadavg()]
    finish(results, args.out)


def finish(results: dict, out: Path) -> None:
    text = report(results)
    results["table"] = text
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(text)
    print(f"results: {out}")


if __name__ == "__main__":
    main()

"""End-to-end continual runs on the synthetic benchmark with the tiny preset (small caps)."""

import copy
import json
import random
from collections import Counter

import pytest
import torch

from jumplora.cli import main
from jumplora.config import RunConfig
from jumplora.continual import ContinualState, evaluate_mid_task, prepare, run_continual, subset_indices
from jumplora.data import load_benchmark
from jumplora.evaluation import exact_match_flags
from jumplora.methods import METHODS, get_method
from jumplora.steps import Watch

CAPS = ["--max-train-per-task", "96", "--max-eval-per-task", "16"]  # 3 optimizer steps per task


def run(tmp_path, tiny_cache, name, *extra):
    out = tmp_path / name
    code = main(["run", "--quiet", "--order", "1", "--out", str(out), "--cache-dir", str(tiny_cache), *CAPS, *extra])
    assert code == 0
    return json.loads((out / "results.json").read_text()), out


@pytest.mark.timeout(1800)  # includes the one-off build of the tiny preset on a fresh cache
def test_same_seed_gives_identical_results_and_a_complete_run_dir(tmp_path, tiny_cache, capsys):
    first, out = run(tmp_path, tiny_cache, "a", "--method", "jumplora+ella", "--save-model", str(tmp_path / "m"))
    second, _ = run(tmp_path, tiny_cache, "b", "--method", "jumplora+ella")
    for key in ("accuracy_matrix", "dev_accuracy_matrix", "oa", "bwt", "thresholds", "loss_curves", "sparsity"):
        assert first[key] == second[key], key
    matrix = first["accuracy_matrix"]
    assert [sum(v is not None for v in row) for row in matrix] == [1, 2, 3, 4]
    assert all(0.0 <= v <= 1.0 for row in matrix for v in row if v is not None)
    assert first["lambdas"] == [0.0, 3e4, 3e4, 3e4]
    assert first["tasks"] == ["dbpedia", "amazon", "yahoo", "agnews"]
    assert len(first["loss_curves"]["ce"][0]) == 3 and first["loss_curves"]["penalty"][0] == [0.0, 0.0, 0.0]
    assert any(p > 0 for p in first["loss_curves"]["penalty"][1])  # λ·P is on from task 2
    assert all(0.0 < s["overall"] < 1.0 for s in first["sparsity"])  # thresholded, not empty
    assert set(first["thresholds"][0]) == {"global"}
    assert (out / "updates.safetensors").exists() and (out / "summary.txt").exists()
    # the majority-class bar of each task's test split: the largest label count over the split size
    capped = load_benchmark(None, seed=42, max_train_per_task=96, max_eval_per_task=16, tasks=first["tasks"])
    test_splits = [capped.tasks[t].test for t in first["tasks"]]
    counts = [Counter(ex.label for ex in split) for split in test_splits]
    assert first["majority_baseline"] == [max(c.values()) / sum(c.values()) for c in counts]
    assert "majority " in (out / "summary.txt").read_text()
    # `jumplora eval` on the saved merged model reproduces the last row of the matrix
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "m"), "--order", "1", "--quiet", "--json", *CAPS]) == 0
    scores = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert [scores[t] for t in first["tasks"]] == matrix[-1]


@pytest.mark.timeout(1800)  # includes the one-off build of the tiny preset on a fresh cache
@pytest.mark.parametrize("method", ["inclora", "jumplora+ella"])
def test_fast_evaluation_equals_generate_on_a_trained_model(tiny_cache, method):
    config = RunConfig(order=1, method=method, max_train_per_task=96, max_eval_per_task=24)
    ws = prepare(config, tiny_cache, progress=False)
    ws.tasks = ws.tasks[:2]  # two tasks train the model; the merged (plain) model is evaluated on every task's data
    run_continual(ws, progress=False)
    assert not any("lora" in name for name, _ in ws.model.named_parameters())
    assert len(ws.encoded) == 4
    for task in ws.encoded:
        for split in ("dev", "test"):
            encoded = ws.encoded[task][split]
            fast = exact_match_flags(ws.model, ws.tokenizer, encoded, progress=False, mode="fast")
            slow = exact_match_flags(ws.model, ws.tokenizer, encoded, progress=False, mode="generate")
            assert fast == slow, (task, split)


@pytest.mark.timeout(1800)  # includes the one-off build of the tiny preset on a fresh cache
def test_per_block_thresholds_and_plain_model_after_merge(tiny_cache):
    config = RunConfig(order=1, method="jumplora+inclora", threshold="per_block", max_train_per_task=96,
                       max_eval_per_task=8)
    ws = prepare(config, tiny_cache, progress=False)
    before = {n: p.detach().clone() for n, p in ws.model.named_parameters()}
    ws.tasks = ws.tasks[:1]
    state = run_continual(ws, progress=False)
    n_blocks = ws.model.config.num_layers + ws.model.config.num_decoder_layers
    assert len(state.records[0].thresholds) == n_blocks
    after = dict(ws.model.named_parameters())
    assert after.keys() == before.keys()  # plain model: no adapter parameters left
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed == {f"{name}.weight" for name in state.records[0].update}  # only the adapted q/v weights moved


@pytest.mark.timeout(900)  # includes the build of the causal test preset on a fresh cache
def test_a_causal_run_end_to_end(tmp_path, causal_preset, capsys):
    """The causal test preset (`causal_preset`: tiny-causal's shape, briefly pre-trained) as `--model`: a full order
    with per-layer thresholds, the merged model saved in Hugging Face format and registered in MLflow
    (`--register-model`), loaded back as a causal LM (by MLflow's transformers flavor too), re-evaluated by `jumplora
    eval` from its registered version, its pyfunc's labels scoring task 1 as the run did, and fast evaluation equal to
    `generate` on it."""
    import mlflow
    from mlflow import MlflowClient
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    from jumplora import plots
    from jumplora.data.encode import PromptEncoder, normalise_answer, prompt_source
    from jumplora.models import load_model
    from jumplora.tracking import models

    caps = ["--max-train-per-task", "96", "--max-eval-per-task", "24", "--data-dir", "synthetic"]
    out, uri = tmp_path / "causal", f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["run", "--quiet", "--order", "1", "--out", str(out), "--cache-dir", str(causal_preset.parent), *caps,
                 "--model", str(causal_preset), "--method", "jumplora+ella", "--threshold", "per_block",
                 "--tracking-uri", uri, "--register-model", "causal"]) == 0
    results = json.loads((out / "results.json").read_text())
    matrix = results["accuracy_matrix"]
    assert [sum(v is not None for v in row) for row in matrix] == [1, 2, 3, 4]
    layers = {f"model.layers.{i}" for i in range(4)}  # the preset's 4 decoder layers, one τ each
    assert all(set(thresholds) == layers for thresholds in results["thresholds"])
    assert results["jaccard"]["middle_block"] == "model.layers.2"
    assert all(0.0 < s["overall"] < 1.0 for s in results["sparsity"])
    for figure in (plots.HEATMAP, plots.SPARSITY, plots.OVERLAP, plots.BWT_RADAR):  # by layer, middle layer, ...
        assert (out / figure).stat().st_size > 0, figure

    merged = out / "merged_model"
    reloaded = AutoModelForCausalLM.from_pretrained(merged)
    assert isinstance(reloaded, LlamaForCausalLM)
    assert not any("lora" in name for name, _ in reloaded.named_parameters())
    assert MlflowClient(uri).get_model_version("causal", "1").tags["jumplora.method"] == "jumplora+ella"
    capsys.readouterr()
    assert main(["eval", "models:/causal/1", "--tracking-uri", uri, "--order", "1", "--quiet", "--json", *caps]) == 0
    scores = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert [scores[t] for t in results["tasks"]] == matrix[-1]

    benchmark = load_benchmark(None, seed=42, max_train_per_task=96, max_eval_per_task=24, tasks=results["tasks"])
    first = benchmark.tasks[results["tasks"][0]]
    with models._store(uri):
        assert not mlflow.transformers.load_model("models:/causal/1").model.config.is_encoder_decoder
        predicted = mlflow.pyfunc.load_model("models:/causal/1").predict([prompt_source(first.spec, e.text)
                                                                          for e in first.test])
    right = [answer == normalise_answer(e.label) for answer, e in zip(predicted, first.test, strict=True)]
    assert sum(right) / len(right) == matrix[-1][0]

    model, tokenizer = load_model(str(merged), cache_dir=merged, progress=False)
    encoder = PromptEncoder(tokenizer, causal=True)
    for task in results["tasks"]:
        for split in ("dev", "test"):
            encoded = encoder.encode_all(benchmark.tasks[task].spec, benchmark.tasks[task].split(split))
            fast = exact_match_flags(model, tokenizer, encoded, progress=False, mode="fast")
            slow = exact_match_flags(model, tokenizer, encoded, progress=False, mode="generate")
            assert fast == slow, (task, split)


@pytest.mark.timeout(900)  # includes the build of the causal test preset on a fresh cache
@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_runs_on_the_causal_preset(causal_preset, method):
    """Two tasks of order 1 on the causal test preset: the model is plain afterwards, the recorded updates are those of
    the attention's q_proj/v_proj, and an adapter method moved only those weights."""
    spec = get_method(method)
    config = RunConfig(order=1, model=str(causal_preset), method=method, max_tasks=2, max_train_per_task=65,
                       max_eval_per_task=8)
    ws = prepare(config, causal_preset.parent, progress=False)
    before = {n: p.detach().clone() for n, p in ws.model.named_parameters()}
    state = run_continual(ws, progress=False)
    assert [sum(v is not None for v in r.test) for r in state.records] == ([2] if spec.joint else [1, 2])
    after = dict(ws.model.named_parameters())
    assert after.keys() == before.keys()  # plain: no adapter parameters left
    for record in state.records:
        assert {name.rsplit(".", 1)[1] for name in record.update} == {"q_proj", "v_proj"}
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    if spec.adapter.whole_model:
        assert "model.embed_tokens.weight" in changed and "lm_head.weight" in changed
    else:
        assert changed == {f"{name}.weight" for record in state.records for name in record.update}


def test_a_rung_subset_is_fixed_by_seed_task_and_split_and_leaves_the_global_rngs_alone():
    torch.manual_seed(0)
    random.seed(0)
    states = torch.get_rng_state(), random.getstate()
    first = subset_indices(64, 8, 42, "amazon", "dev")
    assert first == subset_indices(64, 8, 42, "amazon", "dev") == sorted(set(first)) and len(first) == 8
    assert torch.equal(torch.get_rng_state(), states[0]) and random.getstate() == states[1]
    assert first != subset_indices(64, 8, 42, "yahoo", "dev") and first != subset_indices(64, 8, 7, "amazon", "dev")
    assert subset_indices(5, 8, 42, "amazon", "dev") == subset_indices(5, None, 42, "amazon", "dev") == [0, 1, 2, 3, 4]


@pytest.mark.timeout(1800)  # includes the one-off build of the tiny preset on a fresh cache
def test_a_watched_task_trains_exactly_as_an_unwatched_one(tiny_cache):
    """Rungs read the model in the middle of a task (dev subsets, eval mode) and change nothing. ELLA's LoRA dropout
    (p = 0.1) draws from the global RNG at every step, so a rung that drew from it, or left the model in eval mode,
    would change the task's update: a callback that draws one number does."""
    config = RunConfig(order=1, method="ella", max_train_per_task=96, max_eval_per_task=16)
    ws = prepare(config, tiny_cache, progress=False)
    base = copy.deepcopy(ws.model.state_dict())

    def run(callback=None) -> ContinualState:
        ws.model.load_state_dict(base)
        watch = Watch(0, frozenset({1, 2}), callback) if callback else None  # task 1's steps 1 and 2 of 3
        return run_continual(ws, ContinualState(), progress=False, stop=1, test=False, watch=watch)

    plain, seen = run(), []
    watched = run(lambda step: seen.append((step, evaluate_mid_task(ws, 0, 8).accuracies, ws.model.training)))
    assert [step for step, _, _ in seen] == [1, 2] and all(training for _, _, training in seen)
    assert all(len(accuracies) == 1 and accuracies[0] in {i / 8 for i in range(9)} for _, accuracies, _ in seen)
    ours, theirs = watched.records[0], plain.records[0]
    assert ours.update.keys() == theirs.update.keys()
    assert all(torch.equal(ours.update[key], theirs.update[key]) for key in ours.update)
    assert (ours.ce, ours.dev, ours.dev_flags) == (theirs.ce, theirs.dev, theirs.dev_flags)
    drawn = run(lambda step: torch.rand(1)).records[0].update
    assert not all(torch.equal(drawn[key], theirs.update[key]) for key in drawn)

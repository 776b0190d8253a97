"""`train_task` data-parallel over 2 gloo processes (`jumplora.distributed.Shard`, no Ray cluster) when the last
global batch is smaller than the number of workers: the worker with an empty share still takes part in every
all-reduce (contributing zero), and the result equals the single-process loop. The single-process loop with 2
micro-batches adds up the same two pieces as the 2 workers, so it gives the very same updates, bit for bit. Run on a
random T5 and on the causal test preset (`causal_preset`: a Llama-style decoder)."""

from __future__ import annotations

import random

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from jumplora.config import RunConfig
from jumplora.data.encode import Encoded
from jumplora.distributed import SINGLE, Shard
from jumplora.methods.ella import Ella
from jumplora.training import train_task
from tests.conftest import make_t5

WORLD = 2
BATCH = 4
N_TRAIN = 3 * BATCH + 1  # 4 steps; the last global batch holds 1 example, so rank 1's share of it is empty
LAM = 1e3


def examples(n: int, seed: int) -> list[Encoded]:
    rng = random.Random(seed)
    return [Encoded(tuple(rng.randrange(2, 50) for _ in range(rng.randrange(4, 9))) + (1,),
                    tuple(rng.randrange(2, 50) for _ in range(rng.randrange(1, 3))) + (1,), "x") for _ in range(n)]


def config(method: str, micro_batches: int) -> RunConfig:
    return RunConfig(method=method, batch_size=BATCH, micro_batches=micro_batches, lora_dropout=0.0, rank=4,
                     device="cpu")


def load(model_dir: str | None):
    """A random T5, or the causal preset saved in `model_dir`."""
    if model_dir is None:
        return make_t5()
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir).requires_grad_(False)


def train(method: str, shard: Shard = SINGLE, micro_batches: int = 1, model_dir: str | None = None) -> dict:
    """Task 1 (λ = 0) in one process, then task 2 with λ·P against W_past: in one process (in `micro_batches`
    passes a step) or on `shard`."""
    torch.set_num_threads(1)
    model = load(model_dir)
    trained = train_task(model, examples(N_TRAIN, 1), task_name="one", task_seed=1, lams=[0.0], regularisers=[None],
                         config=config(method, 1), pad_id=0, device=torch.device("cpu"), progress=False)
    first = trained.record(0)
    trained.adapter.merge(0)
    past = {name: update.clone() for name, update in first.update.items()}
    run_config = config(method, micro_batches)
    record = train_task(model, examples(N_TRAIN, 2), task_name="two", task_seed=2, lams=[LAM],
                        regularisers=[Ella(past, run_config.settings.ella_delta)], config=run_config, pad_id=0,
                        device=torch.device("cpu"), shard=shard, progress=False).record(0)
    return {"ce": record.ce, "penalty": record.penalty, "updates": record.update}


def ddp_worker(rank: int, method: str, store: str, out: str, model_dir: str | None) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        result = train(method, Shard(rank, WORLD, rank), model_dir=model_dir)
    finally:
        dist.destroy_process_group()
    torch.save(result, f"{out}/rank{rank}.pt")


@pytest.mark.timeout(900)  # includes the build of the causal test preset on a fresh cache
@pytest.mark.parametrize(("method", "model"), [("ella", "t5"), ("jumplora+ella", "t5"), ("jumplora+ella", "causal")])
def test_an_empty_share_of_the_last_batch_still_joins_the_all_reduce(method, model, tmp_path, causal_preset):
    model_dir = None if model == "t5" else str(causal_preset)
    single = train(method, model_dir=model_dir)
    mp.spawn(ddp_worker, args=(method, str(tmp_path / "store"), str(tmp_path), model_dir), nprocs=WORLD, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    assert len(single["ce"]) == 4 and single["penalty"][-1] > 0  # the short last step has λ·P on
    for ddp in ranks:
        assert ddp["ce"] == pytest.approx(single["ce"], rel=1e-5)
        # λ·P of the last step reads ΔW_t after three steps: the all-reduce's 1e-7 rounding can put an element near
        # τ on the other side of the jump (below): 3.5e-4 of a penalty of 1.3e-4 on the full tiny-causal preset.
        assert ddp["penalty"] == pytest.approx(single["penalty"], rel=1e-3)
        assert ddp["updates"].keys() == single["updates"].keys()
        flipped = {name: ((update == 0) != (ddp["updates"][name] == 0)).float().mean().item()
                   for name, update in single["updates"].items()}
        for name, update in single["updates"].items():
            if not any(flipped.values()):
                assert torch.allclose(ddp["updates"][name], update, rtol=1e-4, atol=1e-6), name
            else:  # an element within rounding of τ lands on the other side of the jump, and the next steps follow it
                assert flipped[name] <= 1e-3, name  # (full tiny-causal: at most 16 of 16384 in a layer)
                assert (ddp["updates"][name] - update).norm() <= 5e-2 * update.norm(), name  # (at most 3.3e-2)
    for name in single["updates"]:  # every worker merged the same update
        assert torch.equal(ranks[0]["updates"][name], ranks[1]["updates"][name])
    accumulated = train(method, micro_batches=WORLD, model_dir=model_dir)
    assert accumulated["ce"] == pytest.approx(ranks[0]["ce"], rel=1e-6)  # the logged sums round differently
    assert accumulated["penalty"] == ranks[0]["penalty"]
    for name, update in accumulated["updates"].items():
        assert torch.equal(update, ranks[0]["updates"][name]), name

"""What logging a large merged model to MLflow costs (`jumplora.tracking.models`, docs/DECISIONS.md): a T5 of
t5-large's shape (24+24 layers, d_model 1024, d_ff 4096, 16 heads, vocabulary 32128) with random weights, saved as a
run saves its merged model (with the tiny preset's tokenizer), then logged as a run logs it (the LoggedModel from the
checkpoint folder, metrics linked, registered) to a local sqlite store. Prints the wall time, the process's peak RSS
before and after logging, and the bytes of the checkpoint, of the store's copy and of the temporary copy MLflow makes.

    python bench/log_model.py --run-dir RUN_DIR [--tokenizer DIR] [--scratch DIR]

RUN_DIR: any finished `jumplora run` directory with --save-merged-model (its results.json gives the tags and metrics,
its merged_model/ the tokenizer unless --tokenizer names one, such as the tiny preset's cache folder). On the CPU;
~3 GB of disk per copy."""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import resource
import shutil
import tempfile
import threading
import time
from pathlib import Path


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


class TempWatch(threading.Thread):
    """The largest size the temporary directory reaches while MLflow logs (its copy of the checkpoint)."""

    def __init__(self, root: Path) -> None:
        super().__init__(daemon=True)
        self.root, self.peak, self.done = root, 0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            with contextlib.suppress(FileNotFoundError):  # a file went away while counted
                self.peak = max(self.peak, size(self.root))


def build(checkpoint: Path, tokenizer_dir: Path) -> int:
    """The random t5-large-shaped model saved to `checkpoint` (in its own process); its parameter count."""
    import torch
    from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    config = T5Config(vocab_size=32128, d_model=1024, d_kv=64, d_ff=4096, num_layers=24, num_decoder_layers=24,
                      num_heads=16, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    model = T5ForConditionalGeneration(config)
    model.save_pretrained(checkpoint)
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(checkpoint)
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--tokenizer", type=Path, default=None, help="tokenizer folder (default: RUN_DIR's)")
    parser.add_argument("--scratch", type=Path, default=None, help="where the checkpoint and store go (a temp dir)")
    args = parser.parse_args()
    from jumplora import tracking
    from jumplora.results import read_results
    from jumplora.tracking.runs import final_metrics

    scratch = Path(tempfile.mkdtemp(dir=args.scratch))
    try:
        checkpoint = scratch / "run" / tracking.MERGED_MODEL_DIR
        # built in a child process, so that this process's peak RSS is the logging's alone
        with concurrent.futures.ProcessPoolExecutor(1) as pool:
            tokenizer = args.tokenizer or args.run_dir / tracking.MERGED_MODEL_DIR
            parameters = pool.submit(build, checkpoint, tokenizer).result()
        results = read_results(args.run_dir / "results.json")
        tracker = tracking.Tracker(f"sqlite:///{scratch / 'mlflow.db'}")
        run = tracker.start("bench-log-model", "t5-large-shaped", "bench", "run")
        tracker.log(run, metrics=final_metrics(results))
        before = peak_rss_gib()
        temp_root = scratch / "tmp"
        temp_root.mkdir()
        watch = TempWatch(temp_root)
        tempfile.tempdir = str(temp_root)  # MLflow's temporary copy goes here, to be measured
        watch.start()
        started = time.perf_counter()
        model_id = tracking.log_merged_model(tracker, run, checkpoint, results, "bench", final_metrics(results),
                                             register="bench-large")
        seconds = time.perf_counter() - started
        watch.done.set()
        watch.join()
        tempfile.tempdir = None
        assert model_id is not None and not tracker.failed
        print(json.dumps({"parameters": parameters, "checkpoint_bytes": size(checkpoint),
                          "store_bytes": size(scratch / "mlartifacts"), "temporary_copy_peak_bytes": watch.peak,
                          "log_seconds": round(seconds, 1), "peak_rss_gib_before_logging": round(before, 2),
                          "peak_rss_gib_after_logging": round(peak_rss_gib(), 2)}, indent=1))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

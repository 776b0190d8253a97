"""How long a refusal takes beside `--help`: a few refused commands and `jumplora --help` (and the grid script's own
`--help`), run in turns (round-robin, so that a load on the machine falls on every command alike), each in an empty
folder that must stay empty; prints min / median / max wall seconds per command and its median's excess over
`jumplora --help`'s (goal: within 0.3 s). Usage: python bench/refusals.py [--rounds N]."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JUMPLORA = str(Path(sys.executable).parent / "jumplora")
GRID = [sys.executable, str(REPO / "ray_jobs" / "grid_lambda.py")]
SEQUENCE = [sys.executable, str(REPO / "ray_jobs" / "train_sequence.py")]
COMMANDS = {  # name → (argv, the exit code it must end with)
    "jumplora --help": ([JUMPLORA, "--help"], 0),
    "jumplora run --order 99": ([JUMPLORA, "run", "--order", "99"], 2),
    "jumplora run --lr -1": ([JUMPLORA, "run", "--lr", "-1"], 2),
    "jumplora report no-such-run": ([JUMPLORA, "report", "no-such-run"], 2),
    "jumplora eval models:/no-such/1": ([JUMPLORA, "eval", "models:/no-such/1"], 2),
    "grid_lambda.py --help": ([*GRID, "--help"], 0),
    "grid_lambda.py --order 99": ([*GRID, "--order", "99", "--data-dir", "synthetic"], 2),
    "grid_lambda.py --eta 1": ([*GRID, "--order", "1", "--eta", "1"], 2),
    "train_sequence.py --order 99": ([*SEQUENCE, "--order", "99", "--data-dir", "synthetic"], 2),
    # refused before Ray starts (`cluster.resources`), once its driver (torch, Ray) is imported
    "grid_lambda.py: cluster too small": ([*GRID, "--order", "1", "--preset", "smoke", "--data-dir", "synthetic",
                                           "--search", "halving", "--cpus-per-worker", "64"], 2),
}


def timed(argv: list[str], code: int) -> float:
    """Wall seconds of `argv` in a new empty folder; its exit code and the folder left empty are checked."""
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("MLFLOW_TRACKING_URI", None)
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - start
        left = sorted(path.name for path in Path(folder).iterdir())
    if done.returncode != code or left:
        raise SystemExit(f"{' '.join(argv)}: exit {done.returncode} (expected {code}), left {left}: {done.stderr}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="runs of each command (default: 5)")
    rounds = parser.parse_args().rounds
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(rounds):
        for name, (argv, code) in COMMANDS.items():
            times[name].append(timed(argv, code))
    help_median = statistics.median(times["jumplora --help"])
    print(f"{'command':<34} {'min':>6} {'median':>7} {'max':>6} {'median − jumplora --help':>25}")
    for name, seconds in times.items():
        median = statistics.median(seconds)
        print(f"{name:<34} {min(seconds):6.2f} {median:7.2f} {max(seconds):6.2f} {median - help_median:+25.2f}")
    print(f"({rounds} rounds, seconds of wall time; each in an empty folder, left empty)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

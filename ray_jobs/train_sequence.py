"""`train_sequence.py`: one continual run (order, method, seed, λ per task) on Ray Train V2 (`ray_jobs/sequence.py`).

The entry script: its options, parsed and checked (`cli.run_config`) before the driver, Ray or torch is imported."""

import argparse
import sys
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a script: import ray_jobs from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from jumplora import tracking  # noqa: E402
from jumplora.kinds import COUNT, POSITIVE_INT  # noqa: E402
from ray_jobs import cli  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    parser = cli.OneLineErrorParser(prog="train_sequence.py", description=__doc__.splitlines()[0])
    cli.add_run_options(parser, "sequence")
    cli.add_cluster_options(parser, "run name (default: order<N>-<method>-<preset>-seed<S>); the same name resumes")
    parser.add_argument("--num-workers", type=POSITIVE_INT, default=1, help="data-parallel training workers")
    parser.add_argument("--use-gpu", action=argparse.BooleanOptionalAction, default=None,
                        help="one GPU per worker (NCCL instead of gloo), or none (default: one when the Ray cluster "
                             "has GPUs)")
    parser.add_argument("--max-failures", type=COUNT, default=3, help="restarts of a failed worker group")
    tracking.add_options(parser)
    return parser


SCRIPT = cli.Script(build_parser, "ray_jobs.sequence:main", lambda args: cli.run_config(args, "sequence"))

if __name__ == "__main__":
    sys.exit(cli.run_main(SCRIPT))

"""`reproduce.py`: the sweep behind the paper's tables on Ray Tune (`ray_jobs/sweep.py`).

The entry script: its options, parsed before the driver, Ray or torch is imported."""

import argparse
import sys
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a script: import ray_jobs from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from jumplora.config import LAMBDA_TABLES  # noqa: E402
from jumplora.data.tasks import BENCHMARK_ORDERS  # noqa: E402
from jumplora.kinds import POSITIVE_INT, SEED, Items, Text  # noqa: E402
from ray_jobs import cli  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    parser = cli.OneLineErrorParser(prog="reproduce.py", description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="sc", type=Text(),
                        help="; ".join(f"{name}: orders {orders}" for name, orders in BENCHMARK_ORDERS.items()))
    parser.add_argument("--methods", default=None, type=Items(Text(), example="inclora,ella"),
                        help="comma-separated, any registered method (a plugin's too; default: every method of "
                             "methods.yaml, the paper's sweep)")
    parser.add_argument("--orders", default=None, type=Items(POSITIVE_INT),
                        help="comma-separated (default: the benchmark's)")
    parser.add_argument("--seeds", default="42,43,44", type=Items(SEED, example="42,43,44"),
                        help="comma-separated seeds")
    parser.add_argument("--lambdas", default="paper", choices=list(LAMBDA_TABLES),
                        help="λ table of the methods with a per-task λ: ELLA-based, EWC (search_spaces/lambdas.yaml)")
    cli.add_run_options(parser, "reproduce")
    cli.add_trial_options(parser, "sweep name (default: reproduce-<benchmark>-<preset>)")
    return parser


SCRIPT = cli.Script(build_parser, "ray_jobs.sweep:main")

if __name__ == "__main__":
    sys.exit(cli.run_main(SCRIPT))

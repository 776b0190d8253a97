"""`grid_lambda.py --order N`: the per-task λ grid of SPEC §5 on Ray Tune (`ray_jobs/grid.py`).

The entry script: its options, parsed and checked (`cli.run_config`) before the driver, Ray or torch is imported."""

import argparse
import sys
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a script: import ray_jobs from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from jumplora import selection  # noqa: E402
from jumplora.config import LAMBDA_GRID  # noqa: E402
from jumplora.kinds import POSITIVE_INT, SEED, Items, Number  # noqa: E402
from ray_jobs import cli, searches  # noqa: E402
from ray_jobs.cluster import AUTO  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    parser = cli.OneLineErrorParser(prog="grid_lambda.py", description=__doc__.splitlines()[0])
    parser.add_argument("--order", type=POSITIVE_INT, required=True, help="task order")
    cli.add_run_options(parser, "grid")
    parser.add_argument("--seeds", default=None, type=Items(SEED, example="1,2,3"),
                        help="several seeds, e.g. 1,2,3: each stage trains every λ on each seed, chooses one λ on the "
                             "mean dev accuracy over the seeds (its SE over them) and each seed carries on from its "
                             "own model; one run directory per seed, runs/seed<S> (default: one seed, the preset's "
                             "or --seed's; not with --seed; ray_jobs/README.md)")
    parser.add_argument("--grid", default=None, type=LAMBDA_GRID,
                        help="λ values, e.g. 1,1e3,1e5 (default: the method's own grid if it has one, else "
                             "search_spaces/lambda_grid.yaml)")
    parser.add_argument("--test-all-trials", action="store_true",
                        help="evaluate the test sets in every trial, not only the chosen one's (the trial table "
                             "then shows every trial's test accuracy; about a third more evaluation)")
    parser.add_argument("--lambdas-per-trial", type=Number(whole=True, low=1, words=(AUTO,)), default=AUTO,
                        help=f"λ of a stage trained together in one trial (one process, one base model, a stack of "
                             f"adapters; the same numbers); {AUTO} (default): on a CPU a stage's λ spread over the "
                             f"trials that run at once, one per trial on a GPU (until a stack's GPU memory is "
                             f"calibrated); 1: one λ per trial, the shortest wall time when the cluster holds a "
                             f"device per λ (ray_jobs/README.md)")
    searches.add_options(parser)
    parser.add_argument("--select", choices=selection.RULES, default=selection.BEST,
                        help="the λ a stage keeps: " + "; ".join(f"{rule}: {text}" for rule, text in
                                                                  selection.DESCRIPTIONS.items())
                             + " (ray_jobs/README.md)")
    cli.add_trial_options(parser, "grid name (default: grid-order<N>-<method>-<threshold>-<delta>-<preset>-seed<S>, "
                                  "with --seeds …-seeds<S1>-<S2>-…)")
    parser.add_argument("--calibrate", action="store_true",
                        help="print the plan with an estimated time: a few training steps and an evaluation batch of "
                             "the model, timed on one trial's resources; trains nothing else")
    return parser


SCRIPT = cli.Script(build_parser, "ray_jobs.grid:main", lambda args: cli.run_config(args, "grid", order=args.order))

if __name__ == "__main__":
    sys.exit(cli.run_main(SCRIPT))

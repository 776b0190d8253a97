"""Command-line pieces shared by the entry scripts: their boundary (one-line errors, exit 2), run options, preset +
overrides. Light: an entry script's arguments are parsed and checked here before its driver (and with it Ray and
torch) is imported, so that a refusal or `--help` takes what `jumplora`'s do."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from jumplora import options, ownership, spaces, tracking
from jumplora.adapter_kinds import resolve
from jumplora.config import RunConfig
from jumplora.data.location import with_data_located
from jumplora.data.orders import order_tasks
from jumplora.errors import entry_point
from jumplora.kinds import POSITIVE, POSITIVE_INT, STORAGE_SCHEMES, Name, Number, Text, Uri
from jumplora.methods import check
from ray_jobs.cluster import AUTO, TRIAL_DRIVER_CPUS, WorkerRequest, resolve_gpus

DEFAULT_STORAGE = "~/ray_results"
INTERRUPTED = "interrupted: run the same command again to resume (finished tasks, trials and stages are kept)"


class OneLineErrorParser(options.Parser):
    """A Ray script's parser (`options.Parser`: a usage error is one line, printed by `run_main`)."""

    see = "(see {prog} --help)"


@dataclass(frozen=True)
class Script:
    """An entry script: its parser, its driver's `main(args)` ("module:function", imported once the arguments
    passed; or the function), and a light `check(args)` before that import, or None. Called, it runs without the
    entry point's boundary (`run_main`): an error propagates."""

    parser: Callable[[], argparse.ArgumentParser]
    main: str | Callable[[argparse.Namespace], int]
    check: Callable[[argparse.Namespace], object] | None = None

    def __call__(self, argv: list[str] | None = None) -> int:
        args = self.parser().parse_args(argv)
        if self.check is not None:
            self.check(args)
        return resolve(self.main)(args)


def run_main(script: Script, argv: list[str] | None = None) -> int:
    """Run `script` on `argv` inside every entry point's boundary (`errors.entry_point`: one line on stderr, no
    traceback; exit 2 for bad input, also a trial's that Ray wrapped, 130 for an interrupt, 3 for the unexpected)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    return entry_point(lambda: script(argv), Path(sys.argv[0]).name, "error: ", INTERRUPTED)


def add_run_options(parser: argparse.ArgumentParser, command: str) -> None:
    """A preset of search_spaces/presets.yaml, then explicit overrides: the options of the RunConfig fields that
    `command` shows (grid, sequence or reproduce: `config.option`)."""
    parser.add_argument("--preset", default="paper", type=Text(),
                        help=f"run preset of search_spaces/presets.yaml: {', '.join(spaces.presets())}")
    options.add_config_options(parser, command, preset=True)
    options.add_cache_dir(parser)


def add_cluster_options(parser: argparse.ArgumentParser, name_help: str) -> None:
    storage = parser.add_argument("--storage-path", default=DEFAULT_STORAGE, type=Uri(STORAGE_SCHEMES),
                                  help="local directory (shared by every node) or URI such as s3://bucket/dir")
    ownership.writes(storage, ownership.KINDS[parser.prog])  # its --name folder, marked as the script's
    parser.add_argument("--name", default=None, type=Name(), help=f"{name_help}; one folder under --storage-path")
    parser.add_argument("--cpus-per-worker", type=POSITIVE, default=1.0, help="CPUs of each training worker")


def add_trial_options(parser: argparse.ArgumentParser, name_help: str) -> None:
    """What the Tune jobs (grid, sweep) take besides the run: storage, name, the resources of the concurrent trials,
    the plan, and MLflow tracking."""
    add_cluster_options(parser, name_help)
    parser.add_argument("--workers-per-trial", type=POSITIVE_INT, default=1,
                        help="training workers per trial; more than 1: each trial drives a TorchTrainer")
    parser.add_argument("--gpus-per-worker", type=Number(low=0, words=(AUTO,)), default=AUTO,
                        help=f"GPUs of each training worker; {AUTO}: 1 when the Ray cluster has GPUs, else 0")
    parser.add_argument("--max-concurrent", type=POSITIVE_INT, default=None,
                        help="trials at once (default: as many as the cluster holds)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    tracking.add_options(parser)
    tracking.add_model_options(parser, "<name>/run/merged_model (a sweep: each run's)")


def trial_request(args: argparse.Namespace) -> WorkerRequest:
    """The resources of one trial; `--gpus-per-worker auto` connects to Ray to see whether it has GPUs."""
    driver_cpus = TRIAL_DRIVER_CPUS if args.workers_per_trial > 1 else 0.0
    return WorkerRequest(workers=args.workers_per_trial, cpus=args.cpus_per_worker,
                         gpus=resolve_gpus(args.gpus_per_worker), driver_cpus=driver_cpus)


def run_config(args: argparse.Namespace, command: str, skip: Collection[str] = (), **fields) -> RunConfig:
    """The preset's fields, then the overrides given to `command`'s options but those named in `skip` (a sweep's
    settings of its other methods), then `fields` (order, a method's paper setting, ...); the data located by the
    model (`location.with_data_located`: no model code), checked against its method and its data's orders."""
    settings = spaces.preset(args.preset)
    settings.update({name: value for name, value in options.config_fields(args, command).items() if name not in skip})
    settings.update(fields)
    config = with_data_located(RunConfig.of(settings))
    check(config, options.given(args) - set(skip))
    order_tasks(config.data_dir, config.order)  # an unknown order, as the data names its orders
    return config


def cache_dir(args: argparse.Namespace) -> str:
    """`--cache-dir`, absolute (every worker reads it); a symbolic link there is refused as at every target."""
    ownership.refuse_link(Path(args.cache_dir).expanduser(), "--cache-dir")
    return str(Path(args.cache_dir).expanduser().resolve())

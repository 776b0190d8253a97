"""Command-line pieces shared by the entry scripts: one-line errors (exit 2), run options, preset + overrides."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Collection
from pathlib import Path

from safetensors import SafetensorError

from jumplora import options, ownership, spaces, tracking
from jumplora.config import RunConfig
from jumplora.errors import EXIT_BAD_INPUT, JumpLoRAError, report_bug, write_error
from jumplora.kinds import POSITIVE, POSITIVE_INT, STORAGE_SCHEMES, WRITABLE, Name, Number, PathKind, Text, Uri
from jumplora.methods import check
from jumplora.models import with_data_located
from ray_jobs.cluster import AUTO_GPUS, TRIAL_DRIVER_CPUS, WorkerRequest, resolve_gpus

DEFAULT_STORAGE = "~/ray_results"
DEFAULT_CACHE = "~/.cache/jumplora"  # absolute, so every job and every worker on a node shares the tiny preset
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Appends `(default: …)` to the help of options that have a default and do not state it already."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in help_text:
            return help_text
        return f"{help_text} (default: %(default)s)"


class OneLineErrorParser(argparse.ArgumentParser):
    """Usage errors raise JumpLoRAError, so that `run_main` prints them as every other bad input."""

    def __init__(self, **kwargs) -> None:
        super().__init__(formatter_class=DefaultsHelpFormatter, **kwargs)

    def error(self, message: str):
        raise JumpLoRAError(f"{message} (see {self.prog} --help)")


def run_main(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run `main`; bad input (and a write that fails for a full disk, no permission or a read-only file system)
    becomes `error: <message>` on stderr and exit code 2, an interrupt one line and 130, an exception no check expected
    one line and 3 (`errors.report_bug`: its traceback in a file), all without a traceback."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        return main(argv)
    except JumpLoRAError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted: run the same command again to resume (finished tasks, trials and stages are kept)",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as error:
        found = user_error(error)
        if found is None:
            return report_bug(error, Path(sys.argv[0]).name)
        print(f"error: {found}", file=sys.stderr)
        return EXIT_BAD_INPUT


def user_error(error: BaseException) -> JumpLoRAError | None:
    """The error the user can fix behind `error`: a JumpLoRAError a trial or a Ray Train worker raised (a diverged
    training) that Ray wrapped (`RayTaskError.cause`, `WorkerGroupError.worker_failures`, `raise … from`), or a
    write that failed for a full disk, a permission or a read-only file system; else None."""
    todo, seen = [error], set()
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        cause = getattr(current, "cause", None)  # a RayTaskError is also an instance of its cause's class
        if isinstance(current, JumpLoRAError) and not isinstance(cause, BaseException):
            return current
        if isinstance(current, OSError | SafetensorError) and write_error(current) is not None:
            return write_error(current)
        failures = getattr(current, "worker_failures", None)
        todo += [cause, current.__cause__, *(failures.values() if isinstance(failures, dict) else ())]
    return None


def add_run_options(parser: argparse.ArgumentParser, command: str) -> None:
    """A preset of search_spaces/presets.yaml, then explicit overrides: the options of the RunConfig fields that
    `command` shows (grid, sequence or reproduce: `config.option`)."""
    parser.add_argument("--preset", default="paper", type=Text(),
                        help=f"run preset of search_spaces/presets.yaml: {', '.join(spaces.presets())}")
    options.add_config_options(parser, command, preset=True)
    ownership.writes(parser.add_argument("--cache-dir", default=DEFAULT_CACHE, type=PathKind(WRITABLE),
                                         help="cache of the tiny preset on every node"), ownership.CACHE)


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
    parser.add_argument("--gpus-per-worker", type=Number(low=0, words=(AUTO_GPUS,)), default=AUTO_GPUS,
                        help=f"GPUs of each training worker; {AUTO_GPUS}: 1 when the Ray cluster has GPUs, else 0")
    parser.add_argument("--max-concurrent", type=POSITIVE_INT, default=None,
                        help="trials at once (default: as many as the cluster holds)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    tracking.add_options(parser)
    parser.add_argument("--save-merged-model", action="store_true",
                        help="publish the final merged model in <name>/run/merged_model (a sweep: in each run's) and "
                             "log it to MLflow as a model")
    tracking.add_register_option(parser)


def trial_request(args: argparse.Namespace) -> WorkerRequest:
    """The resources of one trial; `--gpus-per-worker auto` connects to Ray to see whether it has GPUs."""
    driver_cpus = TRIAL_DRIVER_CPUS if args.workers_per_trial > 1 else 0.0
    return WorkerRequest(workers=args.workers_per_trial, cpus=args.cpus_per_worker,
                         gpus=resolve_gpus(args.gpus_per_worker), driver_cpus=driver_cpus)


def run_config(args: argparse.Namespace, command: str, skip: Collection[str] = (), **fields) -> RunConfig:
    """The preset's fields, then the overrides given to `command`'s options but those named in `skip` (a sweep's
    settings of its other methods), then `fields` (order, a method's paper setting, ...); the data located by the
    model (`models.with_data_located`), checked against its method."""
    settings = spaces.preset(args.preset)
    settings.update({name: value for name, value in options.config_fields(args, command).items() if name not in skip})
    settings.update(fields)
    config = with_data_located(RunConfig.of(settings))
    check(config, options.given(args) - set(skip))
    return config


def cache_dir(args: argparse.Namespace) -> str:
    """`--cache-dir`, absolute (every worker reads it); a symbolic link there is refused as at every target."""
    ownership.refuse_link(Path(args.cache_dir).expanduser(), "--cache-dir")
    return str(Path(args.cache_dir).expanduser().resolve())

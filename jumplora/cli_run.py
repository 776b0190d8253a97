"""`jumplora run`: check everything, then train one continual sequence into its run directory, resumed after its last
finished task, logged to MLflow as it goes (`jumplora.cli` builds its parser and calls it)."""

from __future__ import annotations

import sys
from pathlib import Path

from jumplora import options, ownership, tracking
from jumplora.errors import JumpLoRAError

DEFAULT_RUNS_ROOT = Path("runs")


def run_command(args) -> int:
    """Check everything (the options together, the order in its data, the device, the store, what it will write:
    `ownership`) before torch, a model or MLflow is loaded and before anything is written, then, holding the run
    directory's lock, load the data and the model and train into it."""
    from jumplora.config import RunConfig
    from jumplora.data.location import with_data_located
    from jumplora.data.orders import order_tasks
    from jumplora.lock import DirectoryLock
    from jumplora.methods import check

    config = with_data_located(RunConfig.of(options.config_fields(args, "run")))
    check(config, options.given(args))
    order_tasks(config.data_dir, config.order)  # an unknown order, as the data names its orders
    # (--device, a device this machine has, and --out, not empty text, are their options' kinds: refused as parsed)
    out = DEFAULT_RUNS_ROOT / f"order{config.order}-{config.method}-seed{config.seed}" if args.out is None \
        else Path(args.out)
    ownership.check_run(out, args.save_model, args.cache_dir, args.overwrite)
    tracking.from_args(args)  # a store that can never answer is refused before any work (and not created)
    from jumplora.continual import prepare

    with DirectoryLock(out, "jumplora run", "pass another --out"):  # before the model loads: a refusal is quick
        return train_into(out, prepare(config, args.cache_dir, progress=not args.quiet), args)


def train_into(out: Path, ws, args) -> int:
    """The run in `out`, written through its `ownership.Target`: resumed from its newest intact checkpoint, or
    (`--overwrite`) written beside it and swapped in when complete; a checkpoint after each task; MLflow logged live
    (`jumplora track` logs afterwards what a failed store missed)."""
    from jumplora import checkpoints
    from jumplora.continual import ContinualState, run_continual, single_task_baselines, summarise
    from jumplora.outputs import format_summary, write_run

    base_state = {k: v.detach().clone() for k, v in ws.model.state_dict().items()} \
        if ws.config.single_task_baselines else None
    tracker = tracking.from_args(args)
    log = tracking.ContinualLogger(tracker, out.name, tracking.run_key(out, ws.config.to_dict()))
    try:
        with ownership.Target(out, ownership.RUN, "jumplora run", "--out", args.overwrite) as target:
            state = ContinualState() if target.replacing else resumed(out, ws)
            log.begin(tracking.logged_config(ws.config.to_dict(), ws.lambdas), list(ws.tasks),
                      ws.benchmark.fingerprint, replace=args.overwrite, tags=tracking.run_dir_tag(out))
            for t, record in enumerate(state.records):  # restored tasks that the cut-off run could not log
                log.on_task(t, record)

            def after_task(ws, state, t) -> None:
                checkpoints.save_in_run(target, ws, state)
                log.on_task(t, state.records[t])

            state = run_continual(ws, state, progress=not args.quiet, on_task=after_task)
            baselines = single_task_baselines(ws, base_state, args.cache_dir, not args.quiet) \
                if base_state is not None else None
            results = summarise(ws, state, baselines)
            if args.save_model is not None:
                save_model(ws, args.save_model, "--save-model", args.overwrite)
            if args.save_merged_model or args.register_model:  # part of the run being written: replaced as it is
                with target.tree(tracking.MERGED_MODEL_DIR) as where:
                    ws.model.save_pretrained(where)
                    ws.tokenizer.save_pretrained(where)
            tracking.request_registration(target.path, args.register_model)
            write_run(target.path, results, [record.update for record in state.records])
            checkpoints.drop_run_checkpoints(target)
    except BaseException as error:
        log.fail("KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED")
        raise
    log.end(results, out)
    print(format_summary(results), end="")
    if tracker.failed:
        print(f"MLflow logging failed (see the warning above): `jumplora track {out} --tracking-uri {tracker.uri}` "
              "logs this run once the store answers")
    print(f"run directory: {out}")
    return 0


def resumed(out: Path, ws):
    """The state of the newest intact checkpoint of `out` (a fresh one without), checked against this run's
    configuration; one line on stderr says where the run goes on."""
    from jumplora import checkpoints
    from jumplora.continual import n_trainings

    try:
        state = checkpoints.resume_in_run(out, ws)
    except checkpoints.ConfigMismatchError as error:
        raise JumpLoRAError(f"{out} holds a run cut off under other settings or data ({error}): run it again with "
                            "its own options and data to resume it, or pass --overwrite or another --out") from None
    if state.records:
        print(f"resuming {out} after training {len(state.records)} of {n_trainings(ws)} ({state.records[-1].task})",
              file=sys.stderr)
    return state


def save_model(ws, directory: Path, option: str, overwrite: bool) -> None:
    """The merged model and its tokenizer (Hugging Face format), written aside and put in place once complete
    (`ownership.Target`: a saved model there, checked by `ownership.check_run`, replaced only with `overwrite`, and
    only what its record names)."""
    with ownership.Target(directory, ownership.MODEL, "jumplora run --save-model", option, overwrite, aside=True) \
            as target, target.tree("") as where:
        ws.model.save_pretrained(where)
        ws.tokenizer.save_pretrained(where)

"""The results of a finished run (`results.json`'s payload): matrices, metrics, analysis and cost."""

from __future__ import annotations

from jumplora import analysis, metrics, uncertainty
from jumplora.continual.single_task import SingleTaskBaselines
from jumplora.continual.workspace import ContinualState, Workspace
from jumplora.cost import summary as cost_summary
from jumplora.data.cl_benchmark import task_test_fingerprint
from jumplora.data.encode import normalise_answer
from jumplora.data.types import RowCounts
from jumplora.methods import get_method
from jumplora.results import RunResults


def summarise(ws: Workspace, state: ContinualState, baselines: SingleTaskBaselines | None) -> RunResults:
    """The `results.json` payload (`RunResults`, whose fields say what each holds). FWT is against the run's own kind
    of a0, FWT last row against the shared plain-LoRA a0 (SPEC §4); the flags are None where a record lacks them (a run
    resumed from a checkpoint written before they were kept)."""
    size = len(ws.tasks)
    joint = get_method(ws.config.method).joint  # MTL: one row, after the one training; no BWT or FWT (None)
    a0 = baselines.own if baselines is not None else None
    shared_a0 = baselines.shared if baselines is not None else None
    counts = {task: ws.benchmark.test_rows.get(task, RowCounts(len(ws.encoded[task]["test"]))) for task in ws.tasks}
    padded = [row + [None] * (size - len(row)) for row in state.matrix("test")]
    dev_padded = [row + [None] * (size - len(row)) for row in state.matrix("dev")]
    updates = [record.update for record in state.records]
    results = RunResults(
        order=ws.config.order,
        tasks=list(ws.tasks),
        method=ws.config.method,
        config=ws.config.to_dict(),
        seed=ws.config.seed,
        data_fingerprint=ws.benchmark.fingerprint,
        accuracy_matrix=padded,
        dev_accuracy_matrix=dev_padded,
        single_task_accuracy=a0,  # the run's own adapter kind, trained on each task alone: FWT's a0
        single_task_accuracy_shared=shared_a0,  # plain LoRA, the same for every method: FWT last row's a0
        # test rows labelled outside the options: scored as wrong with --authors-compat (the authors' scoring), else
        # dropped; the labelled rows (before caps) let a report rescale a dropped run to the authors' scoring
        unlabelled_test={"scoring": "wrong" if ws.config.authors_compat else "dropped",
                         "rows": {task: c.unlabelled for task, c in counts.items()},
                         "labelled_rows": {task: c.labelled for task, c in counts.items()}},
        majority_baseline=[metrics.majority_baseline([normalise_answer(e.label) for e in ws.encoded[t]["test"]])
                           for t in ws.tasks],
        oa=metrics.joint_overall_accuracy(padded[0]) if joint else metrics.overall_accuracy(padded),
        la=None if joint else metrics.learning_accuracy(padded),
        bwt=None if joint else metrics.backward_transfer(padded),
        fwt=metrics.forward_transfer(padded, a0) if a0 is not None and not joint else None,
        fwt_last_row=metrics.forward_transfer_last_row(padded, shared_a0) if shared_a0 is not None and not joint
        else None,
        sparsity=[record.sparsity for record in state.records],
        jaccard={"matrix": analysis.jaccard_matrix(updates), "middle_block": analysis.middle_block(list(updates[0])),
                 "mean_with_earlier_middle_block": analysis.overlap_with_earlier(updates)},
        thresholds=[record.thresholds for record in state.records],
        lambdas=ws.lambdas,
        loss_curves={"ce": [record.ce for record in state.records],
                     "penalty": [record.penalty for record in state.records]},
        runtime=state.runtime,
        cost=cost_summary(state.records, state.runtime, baselines.cost if baselines is not None else None),
        test_flags=cell_flags(state, "test"),
        dev_flags=cell_flags(state, "dev"),
        single_task_flags=baselines.own_flags if baselines is not None else None,
        single_task_flags_shared=baselines.shared_flags if baselines is not None else None,
        test_fingerprints=[task_test_fingerprint(ws.benchmark.tasks[task]) for task in ws.tasks],
    )
    intervals = uncertainty.run_intervals(results)
    results.intervals = intervals.to_json() if intervals is not None else None
    return results


def cell_flags(state: ContinualState, split: str) -> list[list[str]] | None:
    """Each record's flags of `split`, a row per training; None when a record lacks them (or its row)."""
    rows = [(record.test_flags, record.test) if split == "test" else (record.dev_flags, record.dev)
            for record in state.records]
    return [flags for flags, _ in rows] if all(row and len(flags) == len(row) for flags, row in rows) else None

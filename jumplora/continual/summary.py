"""The results of a finished run (`results.json`'s payload): matrices, metrics, analysis and cost."""

from __future__ import annotations

from jumplora import analysis, metrics
from jumplora.continual.single_task import SingleTaskBaselines
from jumplora.continual.workspace import ContinualState, Workspace
from jumplora.cost import summary as cost_summary
from jumplora.data.encode import normalise_answer
from jumplora.data.types import RowCounts
from jumplora.methods import get_method
from jumplora.results import RunResults


def summarise(ws: Workspace, state: ContinualState, baselines: SingleTaskBaselines | None) -> RunResults:
    """The `results.json` payload (`RunResults`): config, matrices, OA/BWT/FWT and FWT last row (percent, SPEC §4;
    FWT against the run's own kind of a0, FWT last row against the shared plain-LoRA a0), both a0 rows, how the test
    rows labelled outside the options were scored, sparsity, overlap, thresholds, λ, how the tasks were trained
    (`runtime`) and what the run cost (`jumplora.cost`)."""
    size = len(ws.tasks)
    joint = get_method(ws.config.method).joint  # MTL: one row, after the one training; no BWT or FWT (None)
    a0 = baselines.own if baselines is not None else None
    shared_a0 = baselines.shared if baselines is not None else None
    counts = {task: ws.benchmark.test_rows.get(task, RowCounts(len(ws.encoded[task]["test"]))) for task in ws.tasks}
    padded = [row + [None] * (size - len(row)) for row in state.matrix("test")]
    dev_padded = [row + [None] * (size - len(row)) for row in state.matrix("dev")]
    updates = [record.update for record in state.records]
    return RunResults(
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
        oa=100.0 * sum(padded[0]) / size if joint else metrics.overall_accuracy(padded),
        bwt=None if joint else metrics.backward_transfer(padded),
        fwt=metrics.forward_transfer(padded, a0) if a0 is not None and not joint else None,
        fwt_last_row=metrics.forward_transfer_last_row(padded, shared_a0) if shared_a0 is not None and not joint
        else None,
        sparsity=[record.sparsity for record in state.records],
        jaccard={
            "matrix": analysis.jaccard_matrix(updates),
            "middle_block": analysis.middle_block(list(updates[0])),
            "mean_with_earlier_middle_block": analysis.overlap_with_earlier(updates),
        },
        thresholds=[record.thresholds for record in state.records],
        lambdas=ws.lambdas,
        loss_curves={"ce": [record.ce for record in state.records],
                     "penalty": [record.penalty for record in state.records]},
        runtime=state.runtime,
        cost=cost_summary(state.records, state.runtime, baselines.cost if baselines is not None else None),
    )

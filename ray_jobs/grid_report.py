"""A finished grid's tables and report: each stage's λ chosen with every λ's standing (`grid_report.md`, and on the
driver's output), every trial (`grid_trials.csv`), what each stage ran and what the whole search cost."""

from __future__ import annotations

from jumplora import guidance, selection, tables
from jumplora.outputs import format_summary
from jumplora.results import RunResults, StageRecord
from ray_jobs import jobs

LEGEND = ("= : within one standard error (of the paired difference) of the best, so the data cannot tell it from the "
          "best; a λ without = is not thereby shown worse (one SE is about a 68 % band), * : chosen")
PLOTS = "plots"  # <grid>/plots/lambda_taskNN.png: a stage's dev accuracy against λ (`guidance.lambda_plot`)


def pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.2f}"


def trial_table(records: list[StageRecord]) -> tuple[list[str], list[list]]:
    """Every λ trial: its dev accuracy (and past / current parts) at its last evaluation, where that was, the
    standard error of its dev mean's paired difference to the best λ's and whether the data can tell it from the best
    (`guidance.standings`; blank for a trial cut by a search or recorded without dev flags), its test accuracy
    (chosen trials, or every trial with --test-all-trials), its optimizer steps. A grid of several seeds has a row per
    (λ, seed) and a `seed` column; its SE and `within` are the λ's, over the seeds."""
    seeded = any(r.seeds for r in records)
    header = ["task", "task_name", "lambda", *(["seed"] if seeded else []), "dev_accuracy_seen_pct", "dev_past_pct",
              "dev_current_pct", "evaluated_at", "dev_se_to_best_pct", "within_1se_of_best", "test_accuracy_seen_pct",
              "optimizer_steps", "selected"]
    rows = []
    for r in records:
        found = {standing.lam: standing for standing in guidance.standings(r.trials)}
        for c in r.trials:
            mean, past, current, where = guidance.last_dev(c)
            standing = found.get(c.lam) if c.dev_mean is not None else None
            se = pct(standing.se) if standing else ""
            within = "yes" if standing and standing.within else "no" if standing and standing.se is not None else ""
            rows.append([r.task, r.task_name, f"{c.lam:g}", *([c.seed] if seeded else []), pct(mean), pct(past),
                         pct(current), where, se, within, pct(c.test_mean), "" if c.steps is None else c.steps,
                         "yes" if c.selected else ""])
    return header, rows


def lambda_table(record: StageRecord) -> str:
    """A stage's λ on one line: each λ's mean dev accuracy (%) ± the SE of its paired difference to the best λ's
    (points), `=` where it is within one SE of the best (the data cannot tell it from the best; no `=` does not show
    it worse), `*` the chosen one."""
    cells = []
    for standing in guidance.standings(record.trials):
        se = "" if standing.se is None else f" ± {100 * standing.se:.2f}"
        marks = ("=" if standing.within else "") + ("*" if standing.lam == record.selected_lam else "")
        cells.append(f"{standing.lam:g}: {100 * standing.dev_mean:.2f}{se}{' ' + marks if marks else ''}")
    return "; ".join(cells)


def report_text(records: list[StageRecord], results: RunResults | list[RunResults], rule: str = selection.BEST,
                markdown: bool = False) -> str:
    """The grid's report: each stage's λ chosen by `rule` with every λ's standing and what the choice means
    (`guidance.choice_notes`: an arbitrary choice, a λ at the grid's edge), the run's summary (`results`: the run, or
    the list of each seed's, `summaries`), what the stages ran and cost; in `markdown` (grid_report.md) also every
    trial and the λ plots."""
    over = "the seeds" if any(r.seeds for r in records) else "the dev examples"
    chosen = tables.markdown(["task", "name", "λ chosen", "mean dev accuracy over tasks 1..t (%) ± its SE over "
                              f"{over} (points)",
                              "each λ: mean dev accuracy (%) ± SE of its difference to the best (points)"],
                             [[r.task, r.task_name, f"{r.selected_lam:g}", guidance.chosen_dev_text(r),
                               lambda_table(r) if guidance.lambda_plotted(r) else ""]
                              for r in records])
    total = guidance.search_cost(records)
    notes = [f"- task {r.task} {r.task_name}: {line}" for r in records if guidance.lambda_plotted(r)
             for line in guidance.choice_notes(r.trials, r.selected_lam)]
    parts = [f"λ chosen per task by --select {rule} ({selection.DESCRIPTIONS[rule]}); {LEGEND}:", chosen, *notes,
             *summaries(results),
             "what each stage ran (counted by the workers):", work_table(records),
             f"the whole search: {total['trainings']} trainings, {total['optimizer_steps']} optimizer steps, "
             f"{total['seconds'] / 3600:.3f} h of trials, {total['device_hours']:.3f} {total['device_unit']}-hours "
             "(every trial's training and evaluation; the chosen trials' test rows and the driver not included)"]
    if markdown:
        parts += ["every trial:", tables.markdown(*trial_table(records)), "mean dev accuracy against λ per stage "
                  "(past tasks, current task; each mean with ± one SE of its difference to the best: a bar that "
                  "reaches the best's line is `=`):"]
        parts += [f"![{r.task_name}]({PLOTS}/{guidance.lambda_plot_name(r)})"
                  for r in records if guidance.lambda_plotted(r)]
    return "\n".join(parts)


def summaries(results: RunResults | list[RunResults]) -> list[str]:
    """The run's summary (`format_summary`); a grid of several seeds' runs: each one's, under its seed."""
    runs = results if isinstance(results, list) else [results]
    if len(runs) == 1:
        return [format_summary(runs[0])]
    return [f"seed {run.seed}:\n{format_summary(run)}" for run in runs]


def work_table(records: list[StageRecord]) -> str:
    """Per stage: the search, trainings started, optimizer steps run, dev and test examples evaluated, seconds."""
    works = [jobs.Work(**r.work) if r.work is not None else None for r in records]  # None: finished before counts
    trainings = [len(r.trials) + len(r.baselines) for r in records]
    rows = [[r.task, r.task_name, r.search or "grid", n,
             *([work.steps, work.dev_examples, work.test_examples] if work else ["", "", ""]), f"{r.seconds:.0f}"]
            for r, work, n in zip(records, works, trainings, strict=True)]
    total = sum((work for work in works if work), jobs.Work())
    rows.append(["total", "", "", sum(trainings), total.steps,
                 total.dev_examples, total.test_examples, f"{sum(r.seconds for r in records):.0f}"])
    return tables.markdown(["stage", "task", "search", "trainings", "optimizer steps", "dev examples",
                            "test examples", "seconds"], rows)

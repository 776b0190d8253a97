"""`jumplora report`: runs → the paper's tables (OA by method × order; BWT / FWT by benchmark), each cell the mean ±
sample std (ddof = 1) over seeds, beside the paper's numbers (search_spaces/paper_results.yaml, SPEC §6) where the
runs can be compared with them (the real benchmark, no caps, a real base model; else one line says why none is
shown), a benchmark's column (SC, LS) only over all of its orders; written
as Markdown, JSON and an HTML page with the plots. FWT comes twice (SPEC §4): SPEC's `fwt`, mean_j (a[j][j] − a0[j]),
and `fwt_last_row`, mean_j (a[T][j] − a0[j]) as the authors' evaluation script computes it; the paper's FWT column
matches the latter, so its numbers stand beside `fwt_last_row`.

Every method of the registry has its rows, in the paper's order (search_spaces/methods.yaml): the paper's four,
then the reference baselines (SPEC §7), whose paper number, where there is one (EWC's OA), stands beside ours as well.
MTL trains once on the union of the order's tasks: its results.json has no BWT or FWT (null), printed as `–`.

The tables compare with the paper, so they score every run as the authors' script does: test rows labelled outside
the options (MNLI's "-") count as wrong (SPEC §4). A run that dropped them (no `--authors-compat`) is rescaled from
its matrix and a0 rows (`authors_scored`); the Runs list shows each run as recorded, with its scoring. A third table
shows what each method's runs cost (trainings, optimizer steps, wall and device hours; `jumplora.cost`).

Runs are run directories (a `results.json`, or a folder searched for them, e.g. a sweep's storage folder) or the
names of MLflow experiments (`jumplora-order1`), whose continual runs' `results.json` artifacts are read.

A row of the tables is one configuration: runs are repeats (a cell's seeds) only when their whole configuration but
the seed is equal (`settings`: λ, caps, the method's own settings, the model, ...); runs of one method that differ
in other settings are rows of their own, labelled by the settings that differ (`labelled`). Of two runs of the same
configuration and seed, the one that finished later is kept, whatever the source (`latest`), and a warning says
which.

A damaged `results.json` (not JSON, truncated, of another schema, missing a key such as "method", a value of the
wrong type or that no run writes: `results.read_results`, the schema every reader reads with) found while searching
a folder or an experiment is skipped with one warning line naming it and what is wrong; one named directly (the
file, or the run directory holding it) is an error, and so is a source where nothing usable is left.

The package, by concern: `runs` (reading and labelling the runs), `summary` (the tables as data), `render` (Markdown,
JSON, the HTML page and its plots, written)."""

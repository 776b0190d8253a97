"""`jumplora report`: runs → the paper's tables (OA by method × order; BWT / FWT by benchmark), each cell the mean ±
sample std (ddof = 1) over seeds, beside the paper's numbers (search_spaces/paper_results.yaml, SPEC §6) where the
runs can be compared with them (else one line says why none is shown), a benchmark's column (SC, LS) only over all
of its orders; written as Markdown, JSON and an HTML page with the plots. FWT comes twice (SPEC §4): SPEC's `fwt`,
mean_j (a[j][j] − a0[j]), and `fwt_last_row`, mean_j (a[T][j] − a0[j]), the authors' script's, which the paper's FWT
column matches. Every method of the registry has its rows, in the paper's order (search_spaces/methods.yaml); MTL's
BWT and FWT are null, printed as `–`.

The tables score every run as the authors' script does (test rows labelled outside the options count as wrong,
SPEC §4); the Runs list shows each run as recorded. The package, by concern: `runs` (the runs read, scored and
labelled by their rows: `collect`), `summary` (the tables as data), `render` (Markdown, JSON, the HTML page and its
plots, written)."""

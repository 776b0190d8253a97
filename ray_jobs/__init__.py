"""Ray jobs for JumpLoRA (ray_jobs/README.md): the entry scripts `train_sequence.py`, `grid_lambda.py` and
`reproduce.py` are thin, the code lives here; the Ray nodes need only `jumplora`, this package's functions travel to
the workers by value (`cluster.connect`)."""

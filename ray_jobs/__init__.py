"""Ray jobs for JumpLoRA: one continual run on Ray Train (`train_sequence.py`), the per-task λ grid on Ray Tune
(`grid_lambda.py`) and the paper's sweep (`reproduce.py`). The entry scripts are thin; the code lives here.

The package is installed with `jumplora` (`jumplora track` logs the jobs' folders with `jumplora.tracking.folders`
alone), but the Ray nodes need only `jumplora`: the functions of this package travel to the workers by value (see
`cluster.connect`)."""

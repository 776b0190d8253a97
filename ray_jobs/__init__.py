"""Ray jobs for JumpLoRA: one continual run on Ray Train (`train_sequence.py`), the per-task λ grid on Ray Tune
(`grid_lambda.py`) and the paper's sweep (`reproduce.py`). The entry scripts are thin; the code lives here.

Only `jumplora` has to be installed on the Ray nodes: the functions of this package travel to the workers by value
(see `cluster.connect`)."""

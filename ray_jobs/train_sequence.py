"""Entry script; see `ray_jobs/sequence.py` and `python ray_jobs/train_sequence.py --help`."""

import sys
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a script: import ray_jobs from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from ray_jobs.cli import run_main  # noqa: E402
from ray_jobs.sequence import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(run_main(main))

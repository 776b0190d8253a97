"""`python -m jumplora.tracking STORE`: `make ui`'s check of its store (`UI_STORE`) before it starts the MLflow
server, the first contact every jumplora command makes (`store.open_store`): silent when the store answers and may be
written, else one line and exit code 2."""

import sys

from jumplora.errors import JumpLoRAError, entry_point
from jumplora.kinds import TRACKING_SCHEMES, uri_problem
from jumplora.tracking.store import open_store


def main(argv: list[str]) -> int:
    """The check, inside every entry point's boundary (`errors.entry_point`)."""
    return entry_point(lambda: check(*argv), "make ui", "jumplora: error: ", "jumplora: interrupted")


def check(uri: str) -> int:
    problem = uri_problem(uri, TRACKING_SCHEMES)
    if problem is not None:
        raise JumpLoRAError(problem)
    open_store(uri, writes=True, instead="pass make ui UI_STORE=<another store>")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

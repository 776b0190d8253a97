"""`python -m jumplora.tracking STORE`: `make ui`'s check of its store (`UI_STORE`) before it starts the MLflow
server, the first contact every jumplora command makes (`store.open_store`): silent when the store answers and may be
written, else one line and exit code 2."""

import sys

from jumplora.errors import EXIT_BAD_INPUT, JumpLoRAError
from jumplora.kinds import TRACKING_SCHEMES, uri_problem
from jumplora.tracking.store import open_store


def main(argv: list[str]) -> int:
    [uri] = argv
    try:
        problem = uri_problem(uri, TRACKING_SCHEMES)
        if problem is not None:
            raise JumpLoRAError(problem)
        open_store(uri, writes=True, instead="pass make ui UI_STORE=<another store>")
    except JumpLoRAError as error:
        print(f"jumplora: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

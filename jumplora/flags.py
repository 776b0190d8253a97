"""Per-example verdicts of one accuracy cell, kept compactly so that any metric can be recomputed and resampled later.

A cell (a split of task j, evaluated after training i) is the list of its examples' right/wrong flags, in the order
the split's examples were evaluated (the same order for every row and every λ of a grid, so cells of one task are
paired example by example). It is stored as text: `"<n>:<base64>"`, the n flags packed 8 to a byte, first flag in
the lowest bit (numpy `packbits(bitorder="little")`), the last byte padded with zeros. "0:" is an empty cell.

Scored-as-wrong rows (`--authors-compat`: test rows labelled outside the options) are part of a cell as `False`
flags after the evaluated ones, so the flags' mean is the accuracy the run reports (under a cap within half a row of
it: `metrics.authors_wrong_rows`). Kept in `TaskRecord`s and results.json (README, Outputs); `jumplora.uncertainty`
reads them."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


def pack(flags: Sequence[bool] | np.ndarray) -> str:
    """`flags` as `"<n>:<base64>"`."""
    import numpy as np  # here, not above: `count` is the results' schema's, which loads no NumPy

    bits = np.asarray(flags, dtype=bool)
    return f"{bits.size}:{base64.b64encode(np.packbits(bits, bitorder='little').tobytes()).decode()}"


def count(text: str) -> int:
    """How many flags `pack`'s text holds (standard library only: `results.RunResults` checks a file's cells with
    it); ValueError when `text` is not of that form."""
    number, sep, data = text.partition(":")
    try:
        if not sep or not number.isascii() or not number.isdigit():
            raise ValueError
        size = len(base64.b64decode(data, validate=True))
    except ValueError:  # binascii.Error, a bad base64, is one
        raise ValueError(f"a cell's flags are '<n>:<base64>', got {text[:40]!r}") from None
    n = int(number)
    if size != -(-n // 8):
        raise ValueError(f"a cell of {n} flags needs {-(-n // 8)} bytes, got {size}")
    return n


def unpack(text: str) -> np.ndarray:
    """The flags of `pack`'s text, a bool array; ValueError when `text` is not of that form (`count`)."""
    import numpy as np

    n = count(text)
    raw = np.frombuffer(base64.b64decode(text.partition(":")[2]), dtype=np.uint8)
    return np.unpackbits(raw, count=n, bitorder="little").astype(bool)

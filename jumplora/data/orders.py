"""Which orders a data source has, before any task is read."""

from __future__ import annotations

from pathlib import Path

from jumplora.data.tasks import PAPER_ORDERS, task_table
from jumplora.errors import JumpLoRAError


def load_orders(data_dir: str | Path | None) -> dict[int, tuple[str, ...]]:
    """The orders of `<data_dir>/tasks.json`, or the paper's six (synthetic benchmark, or a folder without one)."""
    if data_dir is None:
        return dict(PAPER_ORDERS)
    root = Path(data_dir).expanduser()
    if not root.is_dir():
        raise JumpLoRAError(f"data directory {root} does not exist: point --data-dir at a CL_Benchmark folder")
    return task_table(root)[0]


def order_tasks(data_dir: str | Path | None, order: int) -> tuple[str, ...]:
    orders = load_orders(data_dir)
    if order not in orders:
        known = ", ".join(str(o) for o in sorted(orders))
        raise JumpLoRAError(f"unknown order {order}: choose one of {known} (see `jumplora orders`)")
    return orders[order]

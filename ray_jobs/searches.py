"""The λ searches a grid offers (`grid_lambda.py --search`), each declared in a `SearchSpec` whose `Search` is named
by reference, so that --help loads none of it, nor Tune (docs/DECISIONS.md, "A search is a declaration"): the
built-in `grid` and `halving` here, an installed package's through the entry-point group `jumplora.searches`."""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jumplora.adapter_kinds import resolve
from jumplora.errors import JumpLoRAError
from jumplora.kinds import FRACTION, POSITIVE_INT, Items, Number

if TYPE_CHECKING:
    from ray_jobs.search import Search

ENTRY_POINTS = "jumplora.searches"
DEFAULT = "grid"  # the plain grid (`search.Grid`), which a plan compares every other search with


@dataclass(frozen=True)
class Option:
    """An option a search adds to grid_lambda.py: its flag, its kind (`jumplora.kinds`: the argparse type) and help;
    left out, it is None (the search's own default)."""

    flag: str
    kind: Callable[[str], object]
    help: str

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class SearchSpec:
    """A λ search: `name`, --search's word; `help`, what --search's help says of it; `build(args)` (or its reference)
    the checked `Search` from the parsed arguments (`--select`'s rule, its own `options`); `default()` (or its
    reference) its default layout, which a plan compares with the plain grid (None: compared only when chosen);
    `test_all`: whether it runs with --test-all-trials (False: it stops trials early)."""

    name: str
    help: str
    build: Callable[[argparse.Namespace], Search] | str
    options: tuple[Option, ...] = ()
    default: Callable[[], Search] | str | None = None
    test_all: bool = True


SEARCHES: dict[str, SearchSpec] = {}
LOADED: list[bool] = []  # [True] once the entry points' loading has begun


def register(spec: SearchSpec) -> SearchSpec:
    """Add a search (grid_lambda.py's --search then offers it); returns `spec`."""
    known = SEARCHES.get(spec.name)
    if known is not None and known != spec:
        raise JumpLoRAError(f"search {spec.name!r} is registered twice, differently: give the new one another name")
    SEARCHES[spec.name] = spec
    return spec


def searches() -> dict[str, SearchSpec]:
    """Every search by name: the built-in ones, then the installed plugins' (loaded once; one that does not load is
    told on stderr and not offered)."""
    if not LOADED:
        LOADED.append(True)
        for entry in importlib.metadata.entry_points(group=ENTRY_POINTS):
            try:
                spec = entry.load()
                if not isinstance(spec, SearchSpec) or spec.name != entry.name:
                    raise JumpLoRAError(f"it must name a SearchSpec called {entry.name!r}, got {spec!r}")
                register(spec)
            except Exception as error:  # noqa: BLE001 - any failure of a plugin's code
                first = (str(error).strip().splitlines() or [""])[0][:200]
                print(f"warning: the search plugin {entry.name!r} ({entry.value}) does not load "
                      f"({type(error).__name__}: {first}); its search is not offered", file=sys.stderr)
    return SEARCHES


def add_options(parser: argparse.ArgumentParser) -> None:
    """`--search`, its choices and help from the registered searches, and each search's own options."""
    offered = searches()
    parser.add_argument("--search", choices=list(offered), default=DEFAULT,
                        help="; ".join(f"{name}: {spec.help}" for name, spec in offered.items())
                             + " (ray_jobs/README.md)")
    for spec in offered.values():
        for option in spec.options:
            parser.add_argument(option.flag, type=option.kind, default=None, help=f"{spec.name}: {option.help}")


def checked(args: argparse.Namespace) -> Search:
    """The `--search` chosen, built from the parsed arguments (`SearchSpec.build`), after refusing another search's
    options and, for a search that stops trials early, --test-all-trials."""
    chosen = searches()[args.search]
    for spec in searches().values():
        given = [option.flag for option in spec.options if getattr(args, option.dest, None) is not None]
        if given and spec is not chosen:
            raise JumpLoRAError(f"{', '.join(given)} set(s) the {spec.name} search: add --search {spec.name}")
    if args.test_all_trials and not chosen.test_all:
        raise JumpLoRAError(f"--test-all-trials tests every trial of the grid; a {chosen.name} search stops most of "
                            "them early: leave it out, or use --search grid")
    return resolve(chosen.build)(args)


def layouts(chosen: Search, one_seed: bool = True) -> tuple[dict[str, Search], list[str]]:
    """What a plan compares: the chosen search's layout and every other search's default one (a grid of several
    seeds: the grid alone), by name, the grid first; and why each other one is not compared."""
    found, unread = {}, []
    for name, spec in searches().items():
        if name == chosen.name:
            found[name] = chosen
        elif not one_seed and name != DEFAULT:
            unread.append(f"(--search {name} not compared: it searches one seed)")
        elif spec.default is not None:
            try:
                found[name] = resolve(spec.default)()
            except JumpLoRAError as error:  # e.g. halving.yaml unreadable: the plan goes on without it
                unread.append(f"(--search {name} not compared: {error})")
    return found, unread


register(SearchSpec(DEFAULT, "every λ of a stage trains the whole task", "ray_jobs.search:Grid.from_args",
                    default="ray_jobs.search:Grid"))
register(SearchSpec(
    "halving", "successive halving inside each stage, the λ compared at rungs part-way, only the best go on",
    "ray_jobs.halving:Halving.from_args", default="ray_jobs.halving:Halving.default", test_all=False, options=(
        Option("--rungs", Items(FRACTION, example="0.11,0.33"), "rung fractions of a task's optimizer steps, e.g. "
               "0.11,0.33 (default: search_spaces/halving.yaml)"),
        Option("--eta", Number(whole=True, low=2), "the best 1/η of the trials go on at a rung (default: "
               "search_spaces/halving.yaml)"),
        Option("--rung-examples", POSITIVE_INT, "dev examples of each seen task evaluated at a rung, a fixed seeded "
               "subset (default: search_spaces/halving.yaml)"))))

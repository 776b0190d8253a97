"""Numbers before and after a change that should not move them: for every method (the built-ins and the installed
plugins) a 2-task run on the tiny preset, and a smoke λ grid packed one λ a trial and `auto`; each leaves
`updates.safetensors` and `results.json`, compared byte for byte after taking out what a run's clock and checkout
write (run times, the commit).

    python bench/same_numbers.py record OUT                  # runs everything, keeps the digests in OUT/digests.json
    python bench/same_numbers.py check --before OLD OUT      # records OUT, then compares it with OLD's, one line each

The jumplora it runs is the one this interpreter imports (`python -m jumplora`), so a tree's numbers are recorded
by putting that tree first on PYTHONPATH in an interpreter where jumplora is not installed in editable mode.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

BUILT_IN = ("inclora", "jumplora+inclora", "seqft", "ella", "jumplora+ella", "ewc", "o-lora", "jumplora+o-lora", "mtl")
CAPS = ["--order", "1", "--max-tasks", "2", "--max-train-per-task", "96", "--max-eval-per-task", "16"]
# a method without a paper λ table (the l2 example) takes its λ from the command line
LAMBDAS = {"l2": ["--lambdas", "0,100,100,100"]}
CLOCK = {("cost", "wall_seconds"), ("cost", "device_hours"), ("cost", "task_seconds"),
         ("cost", "single_task", "seconds"), ("runtime", "git_commit"), ("runtime", "git_dirty")}


def without_clock(value, path: tuple[str, ...] = ()):
    """`value` (a results.json) less the fields a run's clock and checkout write."""
    if isinstance(value, dict):
        return {key: without_clock(item, (*path, key)) for key, item in value.items() if (*path, key) not in CLOCK}
    return value


def digests(run_dir: Path) -> dict[str, str]:
    results = json.loads((run_dir / "results.json").read_text())
    return {"updates.safetensors": hashlib.sha256((run_dir / "updates.safetensors").read_bytes()).hexdigest(),
            "results.json": hashlib.sha256(json.dumps(without_clock(results)).encode()).hexdigest(),
            "lambdas": json.dumps(results["lambdas"]), "oa": str(results["oa"])}


def run(argv: list[str], log: Path) -> None:
    with log.open("w") as out:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONHASHSEED": "0"})
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): see {log}")


def record(out: Path, cache: Path, reuse: bool) -> dict[str, dict[str, str]]:
    out.mkdir(parents=True, exist_ok=True)
    methods = [*BUILT_IN, *sorted(entry.name for entry in entry_points(group="jumplora.methods"))]
    found = {}
    for method in methods:
        run_dir = out / f"run-{method}"
        if not (reuse and (run_dir / "results.json").exists()):
            run([sys.executable, "-m", "jumplora", "run", *CAPS, "--method", method, "--quiet", "--no-tracking",
                 "--cache-dir", str(cache), "--out", str(run_dir), "--overwrite", *LAMBDAS.get(method, [])],
                out / f"run-{method}.log")
        found[f"run {method}"] = digests(run_dir)
        print(f"run {method}: {found[f'run {method}']}", flush=True)
    import jumplora  # the tree under test: its own ray_jobs

    grid = Path(jumplora.__file__).resolve().parents[1] / "ray_jobs" / "grid_lambda.py"
    for packing in ("1", "auto"):
        name = f"grid-{packing}"
        if not (reuse and (out / "ray" / name / "run" / "results.json").exists()):
            run([sys.executable, str(grid), "--order", "1", "--preset", "smoke", "--max-tasks", "2",
                 "--lambdas-per-trial", packing, "--cache-dir", str(cache), "--storage-path", str(out / "ray"),
                 "--name", name, "--no-tracking"], out / f"{name}.log")
        found[name] = digests(out / "ray" / name / "run")
        print(f"{name}: {found[name]}", flush=True)
    (out / "digests.json").write_text(json.dumps(found, indent=1))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("record", "check"))
    parser.add_argument("out", type=Path)
    parser.add_argument("--before", type=Path, help="check: a folder `record` wrote")
    parser.add_argument("--cache-dir", type=Path, default=Path("runs/cache"))
    parser.add_argument("--reuse", action="store_true", help="keep the runs OUT already holds (a record cut off)")
    args = parser.parse_args()
    if args.action == "check" and args.before is None:
        parser.error("check needs --before")
    found = record(args.out, args.cache_dir, args.reuse)
    if args.action == "record":
        return
    before = json.loads((args.before / "digests.json").read_text())
    differ = 0
    for key in sorted(before.keys() | found.keys()):
        same = before.get(key) == found.get(key)
        differ += not same
        print(f"{'same' if same else 'DIFFERENT'}: {key}" + ("" if same else f"\n  before {before.get(key)}\n"
                                                             f"  after  {found.get(key)}"))
    print(f"{len(found) - differ} of {len(found)} the same")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()

"""`examples/forgetting.py` (`make demo`'s last step) on made-up run directories: a reference and two others, each
with its intervals and a sentence that agrees with them; an old run without flags; bad input as one line."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

from jumplora import flags, metrics, uncertainty
from jumplora.results import RunResults

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "forgetting.py"
spec = importlib.util.spec_from_file_location("forgetting", SCRIPT)
forgetting = importlib.util.module_from_spec(spec)
spec.loader.exec_module(forgetting)


def write(directory: Path, method: str, cells: list[list[list[bool]]] | None, tasks=("t1", "t2"),
          matrix: list | None = None, seed: int = 42) -> Path:
    """A two-task run of order 1 from its test flags (None: as written before flags were kept, from `matrix`)."""
    if cells is not None:
        matrix = [[sum(c) / len(c) for c in row] + [None] * (2 - len(row)) for row in cells]
    results = RunResults(order=1, tasks=list(tasks), method=method, seed=seed, data_fingerprint="data", lambdas=[0, 1],
                         accuracy_matrix=matrix, oa=metrics.overall_accuracy(matrix),
                         bwt=metrics.backward_transfer(matrix),
                         test_flags=None if cells is None else [[flags.pack(c) for c in row] for row in cells])
    intervals = uncertainty.run_intervals(results)
    results.intervals = None if intervals is None else intervals.to_json()
    directory.mkdir(parents=True)
    (directory / "results.json").write_text(json.dumps(results.to_json()))
    return directory


def test_each_run_against_the_first_with_intervals_and_a_sentence(tmp_path, capsys):
    half, right, kept = [True, False] * 8, [True] * 16, [True] * 8 + [False] * 8
    lora = write(tmp_path / "lora", "inclora", [[right], [half, right]])  # task 1 forgotten to 50 %
    same = write(tmp_path / "paper", "jumplora+ella", [[right], [half, right]])  # as forgetful
    better = write(tmp_path / "grid", "jumplora+ella", [[right], [right, kept]])  # task 1 kept, task 2 half
    assert forgetting.main([lora, same, better]) == 0
    out = capsys.readouterr().out
    assert "| t1 (task 1) after task 2 t2 | 50.0 [28.0, 72.0] | 50.0 [28.0, 72.0] | 100.0 [80.6, 100.0] |" in out
    assert "| BWT (points) | -50.00 [-75.0, -25.0] | -50.00 [-75.0, -25.0] | 0.00 [0.0, 0.0] |" in out
    # the diagonal beside task 1's row, and its mean: the grid's run learned task 2 to half only
    assert "| task 2 t2 right after it was learned | 100.0 [80.6, 100.0] | 100.0 [80.6, 100.0] | 50.0 [28.0, 72.0] |" \
        in out
    assert ("| learning accuracy (%): mean of the diagonal | 100.00 [100.0, 100.0] | 100.00 [100.0, 100.0] | "
            "75.00 [62.5, 87.5] |") in out
    lines = out.splitlines()
    # six comparisons (BWT, learning accuracy, OA of two runs), each at 1 − 0.05 / 6 = 99.17 % (the normal's quantile
    # 2.638257: one run a side)
    assert ("Compared with inclora (lora) on the same test examples (6 comparisons, each interval at 99.17 % "
            "(Bonferroni) so that all 6 hold together at 95 %: a difference in any of them is one at 95 %):") in lines
    assert ("jumplora+ella (paper)'s BWT is +0.00 points against inclora (lora)'s (99.17 % interval [0.00, 0.00] over "
            "the test examples of one training run): within noise at this size on these test examples, for this one "
            "training run.") in lines
    # BWT −50 → 0: each of task 1's 16 examples adds 100 · (1 − half) to the difference, 0 or 100: SE = 50 / 4 = 12.5,
    # 50 ± 2.638257 · 12.5
    assert ("jumplora+ella (grid)'s BWT is +50.00 points against inclora (lora)'s (99.17 % interval [17.02, 82.98] "
            "over the test examples of one training run): a difference on these test examples, for this one training "
            "run (higher).") in lines
    # OA 75 → 75 (task 1 up by 50, task 2 down by 50): shares 0 or ±50 in each task, SE = √(2 · 625 / 16)
    assert ("jumplora+ella (grid)'s OA is +0.00 points against inclora (lora)'s (99.17 % interval [-23.32, 23.32] "
            "over the test examples of one training run): within noise at this size on these test examples, for this "
            "one training run.") in lines
    # learning accuracy 100 → 75 (task 2's diagonal 100 → 50): shares 0 or −50 on task 2, SE = √(625 / 16) = 6.25,
    # −25 ± 2.638257 · 6.25; with BWT higher, the less forgetting is a trade-off: the next line says so, once
    trade = ("jumplora+ella (grid) forgets less than inclora (lora) (BWT +50.00 points), but learned task 2 (t2) less "
             "(its accuracy right after learning it 50.0 against 100.0 %; learning accuracy -25.00 points, a "
             "difference on these test examples, for this one training run): a trade-off, not a gain.")
    assert lines[-1] == trade and lines[-3].startswith("jumplora+ella (grid)'s learning accuracy is -25.00 points "
                                                       "against inclora (lora)'s (99.17 % interval [-41.49, -8.51] ")
    assert sum("trade-off" in line for line in lines) == 1
    assert not any(line.endswith("a difference.") or ": a difference," in line for line in lines)


def test_an_old_run_shows_its_numbers_with_one_note(tmp_path, capsys):
    old = write(tmp_path / "old", "inclora", None, matrix=[[1.0, None], [0.5, 1.0]])
    new = write(tmp_path / "new", "jumplora+ella", [[[True] * 4], [[True] * 4, [True] * 4]])
    assert forgetting.main([old, new]) == 0
    out = capsys.readouterr().out
    assert "| BWT (points) | -50.00 | 0.00 [0.0, 0.0] |" in out
    # a results.json written before the learning accuracy was recorded: the mean of its matrix's diagonal
    assert "| learning accuracy (%): mean of the diagonal | 100.00 | 100.00 [100.0, 100.0] |" in out
    assert out.count(uncertainty.NO_FLAGS) == 2  # the note, and why there is no comparison
    assert f"no comparison: inclora (old) has {uncertainty.NO_FLAGS}" in out


@pytest.mark.parametrize(("case", "message"), [
    ("one", "give at least two run directories, the reference first"),
    ("missing", "holds no results.json: pass the directory of a finished run"),
    ("order", "the runs trained different task orders"),
    ("examples", "not evaluated on the same test examples"),
])
def test_bad_input_is_one_line(case, message, tmp_path, capsys):
    cells = [[[True, False]], [[True, False], [True, True]]]
    first = write(tmp_path / "a", "inclora", cells)
    other = {"one": lambda: None, "missing": lambda: tmp_path / "nowhere",
             "order": lambda: write(tmp_path / "b", "inclora", cells, tasks=("t2", "t1")),
             "examples": lambda: write(tmp_path / "b", "inclora", [[[True]], [[True], [True, True]]])}[case]()
    assert forgetting.main([first] if other is None else [first, other]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def test_folders_of_seed_runs_are_compared_over_their_seeds(tmp_path, capsys):
    """A λ grid of several seeds' `runs/` (`seed<S>/` each) against a reference's seed runs: a column per seed, the
    comparisons over the 2 seeds, paired by seed."""
    half, right, kept = [True, False] * 8, [True] * 16, [True] * 8 + [False] * 8
    for seed in (1, 2):
        write(tmp_path / "lora" / f"seed{seed}", "inclora", [[right], [half, right]], seed=seed)
    write(tmp_path / "grid" / "runs" / "seed1", "jumplora+ella", [[right], [half, right]], seed=1)  # BWT as lora's
    write(tmp_path / "grid" / "runs" / "seed2", "jumplora+ella", [[right], [right, kept]], seed=2)  # BWT 0: +50
    assert forgetting.main([tmp_path / "lora", tmp_path / "grid" / "runs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split(" | ")[1:] == ["inclora (lora) seed 1", "inclora (lora) seed 2",
                                         "jumplora+ella (runs) seed 1", "jumplora+ella (runs) seed 2 |"]
    # BWT differences 0 and +50: +25, SE √(S² / 2) = √(1250 / 2) = 25 (each seed its own test examples: no shared
    # term), Student's t with 1 degree of freedom, the Cauchy quantile tan(π (p − ½)), at 1 − 0.05 / 3 (3 comparisons)
    half_width = 25 * math.tan(math.pi * (1 - 0.05 / 3 / 2 - 0.5))
    assert (f"jumplora+ella (runs)'s BWT is +25.00 points against inclora (lora)'s (98.33 % interval "
            f"[{25 - half_width:.2f}, {25 + half_width:.2f}] over 2 seeds and their test examples, probability of "
            "improvement ") in next(line for line in lines if "'s BWT is" in line)
    assert any(line.endswith(": within noise at this size over 2 seeds.") for line in lines if "'s BWT is" in line)


def test_seed_runs_of_other_seeds_are_refused_in_one_line(tmp_path, capsys):
    right = [True] * 4
    write(tmp_path / "lora" / "seed1", "inclora", [[right], [right, right]], seed=1)
    write(tmp_path / "grid" / "seed2", "jumplora+ella", [[right], [right, right]], seed=2)
    assert forgetting.main([tmp_path / "lora", tmp_path / "grid"]) == 2
    assert capsys.readouterr().err == ("error: jumplora+ella (grid) ran seeds 2, inclora (lora) seeds 1: compare runs "
                                       "of the same seeds\n")

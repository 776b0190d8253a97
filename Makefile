# Everything a fresh machine needs: `make demo` and `make test` install first.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

UI_PORT ?= 5000
UI_STORE := sqlite:///$(CURDIR)/runs/mlflow.db

.PHONY: install browser demo test test-fast lint bench ui clean

install: $(STAMP)

# Headless Chromium + its WebDriver for the MLflow UI test (tests/tracking/test_ui.py), for `make test` only: Debian
# packages, installed when missing and running as root; otherwise that one test is skipped with a note.
browser:
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
	      chromium chromium-driver; \
	  else echo "note: chromium/chromium-driver missing and not root: the MLflow UI test will be skipped"; fi; \
	fi

# torch first, alone (the CPU wheel on disk), then everything else with torch pinned as a constraint.
$(STAMP): pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -c constraints.txt -e ".[dev,ray,tracking,build-data]"
	touch $(STAMP)

# What the method is for, over seeds: plain LoRA (inclora) and jumplora+ella with the paper's λ (SPEC §5) on order 1,
# each over DEMO_SEEDS (runs/demo/<arm>/seed<S>), then the two side by side (examples/forgetting.py): task 1's
# accuracy as later tasks arrive, a column per seed; LA, BWT, OA and FWT with their intervals; the paper's λ against
# plain LoRA, paired by seed, its interval over the seeds and their test examples and the verdict it supports. Then
# the λ grid of order 1 on a Ray started inside the process (DEMO_GRID: three λ a stage; it prints the λ chosen per
# task and the final accuracy matrix), set beside plain LoRA's run of the same seed: one training run a side, and
# said so. Smoke preset (tiny T5, synthetic benchmark), caps DEMO_CAPS: 30 optimizer steps a task (the smoke preset's
# 3 show no forgetting); every dev and test example of the synthetic benchmark (64 and 100 a task; DECISIONS, "The
# demo's size"). FWT for every arm: --single-task-baselines, cached in runs/cache/single_task (plain LoRA's a0 is
# inclora's row and the paper's run's shared row; the paper's run adds JumpLoRA's own); the grid trains its a0 in
# stage 1. A rerun trains the runs again (--overwrite) and resumes the grid (its finished stages are kept).
DEMO_CAPS ?= --max-train-per-task 960 --max-eval-per-task 100
DEMO_SEEDS ?= 1 2 3
DEMO_GRID ?= 1,1e3,1e5
demo: install
	for seed in $(DEMO_SEEDS); do \
	  $(VENV)/bin/jumplora run --order 1 --method inclora --seed $$seed $(DEMO_CAPS) --single-task-baselines --quiet \
	    --cache-dir runs/cache --out runs/demo/inclora/seed$$seed --overwrite && \
	  $(VENV)/bin/jumplora run --order 1 --method jumplora+ella --lambdas paper --seed $$seed $(DEMO_CAPS) \
	    --single-task-baselines --quiet --cache-dir runs/cache --out runs/demo/paper/seed$$seed --overwrite \
	  || exit 1; done
	$(PY) examples/forgetting.py runs/demo/inclora runs/demo/paper
	$(PY) ray_jobs/grid_lambda.py --order 1 --preset smoke --seed $(firstword $(DEMO_SEEDS)) --grid $(DEMO_GRID) \
	  $(DEMO_CAPS) --cache-dir runs/cache --storage-path runs/ray --name demo-grid
	$(PY) examples/forgetting.py runs/demo/inclora/seed$(firstword $(DEMO_SEEDS)) runs/ray/demo-grid/run

# Everything, tests/ray_jobs included: local Ray clusters of 2 CPUs, one after another; the tiny T5 preset builds in a
# process of its own meanwhile (a fresh clone on 2 idle cores: 39.8 min with the install, 35.7 of them tests).
# OMP_WAIT_POLICY=PASSIVE: a torch process waiting for its threads sleeps instead of
# spinning, which on 2 cores shared by the build, the tests and their subprocesses spun away half the CPU (a preset
# build beside a busy 2-thread torch process: 51 s and 569 units of the other's work, passive 44 s and 1,412).
test: install browser
	$(PY) -m ruff check .
	OMP_WAIT_POLICY=PASSIVE $(PY) -m pytest -q -ra --durations=40

# The inner loop of development: every test but the `slow` ones (tests/conftest.py marks them by one rule: a test that
# needs the tiny preset, Ray or a server, or lives in tests/ray_jobs or tests/docker), so no preset build, no Ray, no MLflow
# or S3 server, no browser: MEASURED on 2 cores. The slowest tests are listed: keep it under 5 min.
test-fast: install
	OMP_WAIT_POLICY=PASSIVE $(PY) -m pytest -q -ra -m "not slow" --durations=15

lint: install
	$(PY) -m ruff check .

# The MLflow UI on the default store (runs/mlflow.db): one worker, no job-execution processes (ENVIRONMENT.md). A store
# that cannot answer is refused first, in one line, as every jumplora command refuses it (python -m jumplora.tracking).
ui: install
	@mkdir -p runs
	@$(PY) -m jumplora.tracking $(UI_STORE)
	@echo "MLflow UI: http://127.0.0.1:$(UI_PORT)  (store $(UI_STORE); Ctrl-C stops it)"
	@echo "  choose 'Model training' at the top of the sidebar once (MLflow 3.17 opens experiments on GenAI traces"
	@echo "  otherwise); on a runs table, Views > 'JumpLoRA: metrics, cost' shows the main metrics with their"
	@echo "  intervals, the cost, the method and the seed as columns"
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false $(VENV)/bin/mlflow server --host 127.0.0.1 --port $(UI_PORT) \
	  --workers 1 --backend-store-uri $(UI_STORE) --artifacts-destination $(CURDIR)/runs/mlartifacts

# The benchmark suite (bench/run_all.py): a table on stdout and runs/bench/results.json; BENCH_ARGS=--quick for a
# smoke run. Needs the real data next to the repository (../shared/data/CL_Benchmark, or BENCH_ARGS=--data-dir DIR).
bench: install
	$(PY) bench/run_all.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache *.egg-info

"""The merged model of a run as an MLflow 3 LoggedModel (its registration, this module as its `python_function`
flavor) and read back with its run (`recorded_run`, `model_folder`): `docs/DECISIONS.md`, "Merged models are MLflow
models"."""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from jumplora.errors import JumpLoRAError
from jumplora.kinds import MODEL_URIS
from jumplora.ownership import write_text
from jumplora.results import Needs, RunResults
from jumplora.runtime import provenance
from jumplora.tracking.client import KEY_TAG, Run, Tracker, key_of, metric_name
from jumplora.tracking.store import MissingStore, open_store, resolve_uri

MODEL_NAME = "merged_model"  # the LoggedModel's name (its artifact folder)
MERGED_MODEL_DIR = "merged_model"  # where `--save-merged-model` saves the model in the run directory
TASK = "text-generation"
REGISTRATION_FILE = "model_registration.json"  # {"name": NAME}: the run asked for --register-model NAME
PACKAGE = Path(__file__).resolve().parents[1]  # jumplora/, shipped with the model for its pyfunc (`code/`)
# what the model needs to load and decode, pinned to the versions installed (the rest of provenance is not needed)
REQUIREMENTS = ("torch", "transformers", "tokenizers", "safetensors", "pyyaml", "numpy")


def registration_text(name: str) -> str:
    return json.dumps({"name": name}) + "\n"


def request_registration(run_dir: Path, name: str | None) -> None:
    """Record `--register-model NAME` in the run directory (nothing without a name)."""
    if name:
        write_text(Path(run_dir) / REGISTRATION_FILE, registration_text(name))


def requested_registration(run_dir: Path) -> str | None:
    path = Path(run_dir) / REGISTRATION_FILE
    return json.loads(path.read_text())["name"] if path.is_file() else None


def model_tags(results: RunResults, run_key: str) -> dict[str, str]:
    """Order, method, seed, λ per task, the run's key and the code version (git commit, else the package's)."""
    config, found = results.config, provenance()
    code = found["git_commit"] or found["versions"].get("jumplora", "unknown")
    if found["git_commit"] and found["git_dirty"]:
        code += "+dirty"
    return {"jumplora.order": str(config["order"]), "jumplora.method": str(config["method"]),
            "jumplora.seed": str(config["seed"]), "jumplora.lambdas": json.dumps(list(results.lambdas)),
            "jumplora.tasks": json.dumps(list(results.tasks)), "jumplora.run_key": run_key,
            "jumplora.code_version": code}


def pip_requirements() -> list[str]:
    from importlib.metadata import PackageNotFoundError, version

    pins = []
    for package in REQUIREMENTS:
        with contextlib.suppress(PackageNotFoundError):
            pins.append(f"{package}=={version(package)}")
    return pins


def input_example(results: RunResults) -> list[str]:
    """The first test example of the run's first task, as the run prompted it (`data/encode.prompt_source`)."""
    from jumplora.data import load_benchmark
    from jumplora.data.encode import prompt_source

    config, task = results.config, results.tasks[0]
    data = load_benchmark(config["data_dir"], seed=config["seed"], max_train_per_task=1, max_eval_per_task=1,
                          tasks=[task]).tasks[task]
    return [prompt_source(data.spec, data.test[0].text)]


def log_merged_model(tracker: Tracker, run: Run | None, model_dir: Path, results: RunResults, run_key: str,
                     metrics: dict[str, float | None], register: str | None = None) -> str | None:
    """The merged model in `model_dir` (if there is one) as a LoggedModel of `run` (found again by its key, else
    logged), the run's `metrics` (OA, BWT, FWT, FWT last row, cost) linked to it, and with `register` a version of
    that registered model; the model's id (None: none, or not tracked)."""
    if run is None or not tracker or not Path(model_dir).is_dir():
        return None
    return tracker._call(_log, tracker, run, Path(model_dir), results, run_key, metrics, register)


def _log(tracker: Tracker, run: Run, model_dir: Path, results: RunResults, run_key: str,
         metrics: dict[str, float | None], register: str | None) -> str:
    from mlflow.entities import LoggedModelStatus
    from mlflow.models import Model, ModelSignature
    from mlflow.types import ColSpec, Schema

    client, key = tracker.client, key_of(run_key, "merged model")
    found = [m for m in client.search_logged_models([run.experiment_id], filter_string=f"tags.`{KEY_TAG}` = '{key}'")
             if m.status == LoggedModelStatus.READY]
    tags = model_tags(results, run_key)
    if found:
        model_id = found[0].model_id
    else:  # created here, in the run's experiment (`Model.log` alone puts it in the active one, the default)
        model_id = client.create_logged_model(run.experiment_id, name=MODEL_NAME, source_run_id=run.run_id,
                                              tags={**tags, KEY_TAG: key}).model_id
        signature = ModelSignature(inputs=Schema([ColSpec("string")]), outputs=Schema([ColSpec("string")]))
        with _store(tracker.uri):
            # this module as the flavor (`save_model`), the run's metrics of step T − 1 linked; the folder goes
            # absolute: MLflow reads a relative `run/merged_model` as a Hugging Face Hub repository (minutes offline)
            Model.log(artifact_path=None, name=MODEL_NAME, flavor=sys.modules[__name__], run_id=run.run_id,
                      model_id=model_id, checkpoint=str(model_dir.resolve()), signature=signature,
                      input_example=input_example(results), pip_requirements=pip_requirements(),
                      validate_serving_input=False, step=len(results.tasks) - 1)
        tracker.changes += 1
    link_metrics(tracker, run, model_id, metrics)
    if register:
        register_model(tracker, model_id, register, run.run_id, tags)
    return model_id


@contextlib.contextmanager
def _store(uri: str):
    """MLflow's fluent API (which `Model.log` and model URIs use) pointed at `uri` for the block, through its
    environment variables (`mlflow.set_tracking_uri` would stay set after the block)."""
    import os

    names = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")
    before = {name: os.environ.get(name) for name in names}
    os.environ.update(dict.fromkeys(names, uri))
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def save_model(path: str, mlflow_model, checkpoint: str, **kwargs) -> None:
    """The flavor hook of `Model.log`: the transformers flavor's save from the checkpoint folder (files copied,
    nothing loaded), then this module as the `python_function` loader, with the package shipped beside it."""
    import mlflow.transformers

    kwargs.pop("validate_serving_input", None)
    with pipeline_classes():
        mlflow.transformers.save_model(checkpoint, path, task=TASK, mlflow_model=mlflow_model,
                                       code_paths=[str(PACKAGE)], **kwargs)
    mlflow_model.flavors["python_function"]["loader_module"] = __name__
    mlflow_model.save(str(Path(path) / "MLmodel"))


@contextlib.contextmanager
def pipeline_classes() -> Iterator[None]:
    """MLflow 3.17 logs a checkpoint folder with `pipelines.check_task(task)[1]["impl"].__name__`, but transformers 5
    names the pipeline's class there as a dotted string: for the block, `check_task` gives the class itself."""
    import importlib

    from transformers import pipelines

    original = pipelines.check_task

    def check_task(task: str):
        name, meta, options = original(task)
        if isinstance(meta.get("impl"), str):
            module, _, cls = meta["impl"].rpartition(".")
            meta = {**meta, "impl": getattr(importlib.import_module(module), cls)}
        return name, meta, options

    pipelines.check_task = check_task
    try:
        yield
    finally:
        pipelines.check_task = original


def link_metrics(tracker: Tracker, run: Run, model_id: str, metrics: dict[str, float | None]) -> None:
    """The run's values of `metrics` linked to the model: each logged again with the model's id and the run's own
    timestamp and step, which the run's history already holds (so it gains no entry; the model gains the link)."""
    from mlflow.entities import Metric

    linked = []
    for key in (key for key, value in metrics.items() if value is not None):
        if history := tracker.client.get_metric_history(run.run_id, metric_name(key)):
            last = max(history, key=lambda m: (m.step, m.timestamp))
            linked.append(Metric(last.key, last.value, last.timestamp, last.step, model_id=model_id))
    for start in range(0, len(linked), 1000):
        tracker.client.log_batch(run.run_id, metrics=linked[start:start + 1000])


def version_model_id(version) -> str | None:
    """The LoggedModel a model version was made from: MLflow's SQL registry does not keep `model_id` (it reads back
    None), but keeps the source it was registered from, `models:/<model id>`."""
    source = version.source or ""
    return version.model_id or (source.removeprefix("models:/") if source.startswith("models:/m-") else None)


def register_model(tracker: Tracker, model_id: str, name: str, run_id: str, tags: dict[str, str]) -> int | None:
    """A new version of the registered model `name` from the LoggedModel, with `tags` (unless one is already that
    model's), said in one line; its number. A plain file store (`file:` URI or a path), which has no registry of its
    own: one line, and nothing else happens."""
    if "://" not in tracker.uri or tracker.uri.startswith("file:"):
        print(f"warning: the MLflow store {tracker.uri} is a plain file store, which has no model registry: the model "
              f"is logged as models:/{model_id} but not registered as {name!r} (use a sqlite:/// or http:// store)",
              file=sys.stderr)
        return None
    from mlflow.exceptions import MlflowException

    client = tracker.client
    number = next((int(version.version) for version in client.search_model_versions(f"name = '{name}'")
                   if version_model_id(version) == model_id), None)
    if number is None:
        try:
            client.create_registered_model(name)
        except MlflowException as error:
            if error.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        with _store(tracker.uri):  # MLflow reads the source model (models:/m-…) through its fluent tracking URI
            number = int(client.create_model_version(name, f"models:/{model_id}", run_id=run_id, tags=tags,
                                                     model_id=model_id).version)
        tracker.changes += 1
        print(f"registered the model as {name!r} version {number} (models:/{name}/{number}) in the MLflow store "
              f"{tracker.uri}", flush=True)
    link_version(tracker, model_id, name, number)
    return number


def link_version(tracker: Tracker, model_id: str, name: str, number: int) -> None:
    """The version named on the LoggedModel (its `mlflow.modelVersions` tag, which `mlflow.register_model` sets and
    the Models tab's "Registered models" column reads), unless it is there already (a registration cut off between
    the two is completed when it is logged again)."""
    from mlflow.utils.mlflow_tags import MLFLOW_MODEL_VERSIONS

    text = tracker.client.get_logged_model(model_id).tags.get(MLFLOW_MODEL_VERSIONS)
    linked = json.loads(text) if text else []
    if not any(entry.get("name") == name and str(entry.get("version")) == str(number) for entry in linked):
        tracker.client.set_logged_model_tags(model_id, {MLFLOW_MODEL_VERSIONS: json.dumps(
            [*linked, {"name": name, "version": number}])})
        tracker.changes += 1


def recorded_run(source: str, tracking_uri: str | None = None, needs: Needs | None = None) -> RunResults | None:
    """The results of the run that made the model `source` (a run directory, its `merged_model` folder, or a logged
    model's URI: the `results.json` logged with the model's source run, fetched alone), read with what the caller
    `needs` of them; None where none is recorded (a `--save-model` folder, a model whose run logged no results)."""
    from jumplora.results import read_results

    if not source.startswith(MODEL_URIS):
        results = local_model(source)[1]
        return read_results(results, needs) if results is not None else None
    uri = opened(source, tracking_uri)  # before torch (`outputs`) and MLflow load: a refusal is quick
    import mlflow
    from mlflow.exceptions import MlflowException

    from jumplora.outputs import RESULTS

    with tempfile.TemporaryDirectory() as scratch, _store(uri):
        run_id = _refused_as_missing(source, uri, lambda: mlflow.models.get_model_info(source).run_id)
        try:
            return read_results(Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=RESULTS,
                                                                         dst_path=scratch)), needs) if run_id else None
        except MlflowException:  # the run logged no results.json (it failed before its end)
            return None


def local_model(source: str) -> tuple[Path, Path | None]:
    """The model folder that the folder `source` names, and the `results.json` of its run (None: a `--save-model`
    folder, which records none): a run directory's `merged_model`, or a saved model (its `config.json`) and, if it is
    a run directory's `merged_model`, that run's results."""
    from jumplora.outputs import RESULTS

    folder = Path(source)
    if (folder / RESULTS).is_file():
        if not (folder / MERGED_MODEL_DIR / "config.json").is_file():
            raise JumpLoRAError(f"{source} is a run directory without a merged model: run it with "
                                "--save-merged-model, or pass the folder its --save-model wrote")
        return folder / MERGED_MODEL_DIR, folder / RESULTS
    if not (folder / "config.json").is_file():
        raise JumpLoRAError(f"{source} is neither a run directory nor a saved model (no {RESULTS}, no config.json): "
                            "pass a run directory, a --save-model folder or a model's URI")
    results = folder.parent / RESULTS
    return folder, results if folder.name == MERGED_MODEL_DIR and results.is_file() else None


def opened(source: str, tracking_uri: str | None) -> str:
    """The store of a model URI `source`, opened (`open_store`) before MLflow loads; one that is not there holds no
    model, said in one line naming `source`."""
    try:
        return open_store(resolve_uri(tracking_uri))
    except MissingStore as error:
        raise JumpLoRAError(f"{source}: no model there: {error}") from None


def _refused_as_missing(source: str, uri: str, fetch):
    """`fetch()`, MLflow's errors (not found, no server) as one line naming `source` and the store."""
    try:
        return fetch()
    except Exception as error:  # noqa: BLE001 - whatever MLflow raises about a URI it cannot resolve
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
        raise JumpLoRAError(f"{source}: no model there in the MLflow store {uri} ({first}): pass --tracking-uri of "
                            "the store that holds it") from None


@contextlib.contextmanager
def model_folder(source: str, tracking_uri: str | None = None) -> Iterator[Path]:
    """The Hugging Face folder of a merged model: `source` itself (a folder, as its option's kind checked), the
    `merged_model` folder of a run directory, or the checkpoint of a logged model's URI (`kinds.MODEL_URIS`:
    models:/NAME/VERSION, models:/m-<id>, runs:/<run id>/merged_model), downloaded from the store for the block."""
    if not source.startswith(MODEL_URIS):
        yield local_model(source)[0]
        return
    uri = opened(source, tracking_uri)
    import mlflow

    with tempfile.TemporaryDirectory() as scratch, _store(uri):
        local = Path(_refused_as_missing(source, uri, lambda: mlflow.artifacts.download_artifacts(
            artifact_uri=source, dst_path=scratch)))
        if not (local / "model" / "config.json").is_file():
            raise JumpLoRAError(f"{source} is not a merged model logged by jumplora (no model/config.json in it)")
        yield local / "model"


# --- the pyfunc flavor: prompts in, generated labels out


class GeneratedLabels:
    """`mlflow.pyfunc.load_model(uri).predict(prompts)`: the label the model generates for each prompt (greedy, as
    the evaluation decodes; normalised: stripped, lower-case)."""

    def __init__(self, model, tokenizer) -> None:
        from jumplora.data.encode import PromptEncoder
        from jumplora.families import is_causal

        self.model, self.tokenizer, self.causal = model.eval(), tokenizer, is_causal(model)
        self.encoder = PromptEncoder(tokenizer, causal=self.causal)

    def predict(self, model_input, params=None) -> list[str]:
        from jumplora.data.encode import normalise_answer
        from jumplora.evaluation import generate_answers

        prompts = prompt_list(model_input)
        encoded = [self.encoder.encode_prompt(prompt) for prompt in prompts]
        import torch

        with torch.no_grad():
            answers = generate_answers(self.model, self.tokenizer, encoded, "cpu", self.causal) if encoded else []
        return [normalise_answer(answer) for answer in answers]


def prompt_list(model_input) -> list[str]:
    """A string, a list of strings, or the one-column frame or series MLflow makes of them under the signature."""
    if isinstance(model_input, str):
        return [model_input]
    if hasattr(model_input, "iloc") and hasattr(model_input, "columns"):
        model_input = model_input.iloc[:, 0]
    return [str(prompt) for prompt in list(model_input)]


def _load_pyfunc(path: str, model_config: dict | None = None) -> GeneratedLabels:
    """MLflow's pyfunc loader: the checkpoint the transformers flavor saved under `model/`, read as a run reads one."""
    from jumplora.models import load_model

    checkpoint = Path(path) / "model"
    model, tokenizer = load_model(str(checkpoint), cache_dir=checkpoint, progress=False)
    return GeneratedLabels(model, tokenizer)

"""A grid's `manifest.json`: its identity and one record per finished stage, so that a resubmitted job skips the
finished stages."""

from __future__ import annotations

from jumplora.errors import JumpLoRAError
from jumplora.results import StageRecord, read_manifest
from jumplora.storage import MANIFEST, Storage
from ray_jobs import jobs
from ray_jobs.search import Search
from ray_jobs.stages import Stage


class Manifest:
    """`manifest.json`: the grid's identity and one record per finished stage (`StageRecord`: trials, choice,
    checkpoint)."""

    def __init__(self, folder: Storage, identity: dict) -> None:
        self.folder = folder
        data = folder.read_json(MANIFEST) if folder.exists(MANIFEST) else {"job": identity, "stages": []}
        self.job, self.stages = read_manifest(data, f"{folder.uri}/{MANIFEST}")
        if self.job != identity:
            raise JumpLoRAError(f"{folder.uri} holds a grid of another configuration: pass another --name")

    def add(self, record: StageRecord) -> None:
        self.stages.append(record)
        self.folder.write_json(MANIFEST, {"job": self.job, "stages": [stage.to_json() for stage in self.stages]})


def grid_identity(job: jobs.Job, stages: list[Stage], search: Search, seeds: tuple[int, ...] | None = None) -> dict:
    """What must match for a grid to resume another's folder (its manifest's `job`, its marker's digest): the job (of
    the first seed), the λ of each stage, what the search adds (`Search.identity`) and the seeds of a grid of several
    (none for one seed: a grid's identity as before seeds, so that its folders resume)."""
    return {**job.identity(), "lambdas_tried": [list(stage.lambdas) for stage in stages], **search.identity(),
            **({} if seeds is None else {"seeds": list(seeds)})}

"""A live job as a user submits it (`xds submit JOB.yaml`, `POST /jobs`), and what the planner and
the trainer each read of it."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field, model_validator

from xdscheduler.catalog import ModelArch
from xdscheduler.live.shape import GptShape
from xdscheduler.live.training import BUILT_IN, TrainConfig
from xdscheduler.planner.search import JobSpec
from xdscheduler.scenario import GpuRequest, validated
from xdscheduler.schema import FileModel, Name, named
from xdscheduler.yamlfile import read_yaml

MAX_WORKERS = 1024
JOB_NAME = r"^[a-z0-9][a-z0-9-]{0,62}$"
JobName = Annotated[
    str,
    AfterValidator(
        named(
            JOB_NAME,
            "a job's name takes only lowercase letters a-z, digits and '-', from a letter or "
            "digit, at most 63 characters",
        )
    ),
    Field(json_schema_extra={"pattern": JOB_NAME}),
]


class Workers(GpuRequest):
    """How many workers (one accelerator each) a live job may take: min <= max, as a study
    job's accelerators."""

    min: int = Field(default=1, gt=0, le=MAX_WORKERS)
    max: int = Field(default=2, gt=0, le=MAX_WORKERS)


class LiveJob(FileModel):
    """A model to train: its training code (the built-in GPT unless it names its own), its
    shape (what the planner plans with), batch and steps, and how many workers it may take (one
    accelerator each; a CPU core on a local cluster)."""

    name: JobName
    # module:function called with each worker's plan (`live.plan`), or a script run as __main__
    entrypoint: str = Field(
        default=BUILT_IN, max_length=300, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"
    )
    script: str | None = Field(default=None, min_length=1, max_length=4096)
    config: dict[str, Any] = Field(default_factory=dict, max_length=100)  # for the code itself
    model: GptShape = GptShape()
    global_batch: int = Field(default=16, gt=0, le=4096)
    steps: int = Field(default=60, gt=0, le=1_000_000)
    lr: float = Field(default=3e-3, gt=0, le=1)
    seed: int = Field(default=0, ge=0, lt=2**31)
    workers: Workers = Workers()
    priority: int = Field(default=1, ge=0, le=1000)
    tenant: Name = Field(default="default", max_length=200)
    checkpoint_every: int = Field(default=10, gt=0, le=1_000_000)
    # a run that has not stepped this long after its launch (or its last step) is failed by the
    # watchdog and queued again
    startup_timeout_s: float = Field(default=300.0, ge=5.0, le=86_400.0)

    @model_validator(mode="after")
    def _one_kind_of_code(self) -> LiveJob:
        if self.script is not None and self.entrypoint != BUILT_IN:
            raise ValueError("give an entrypoint or a script, not both")
        return self

    def arch(self) -> ModelArch:
        m = self.model
        return ModelArch(
            self.name,
            m.layers,
            m.hidden,
            4 * m.hidden,
            m.heads,
            m.heads,
            m.vocab,
            m.seq,
            False,
            True,
        )

    def spec(self, arrival_s: float, priority: int | None = None) -> JobSpec:
        """What the planner decides on: every sample of every step, as tokens."""
        return JobSpec(
            self.name,
            self.arch(),
            self.global_batch,
            self.model.seq,
            self.workers.min,
            self.workers.max,
            tokens=float(self.steps * self.global_batch * self.model.seq),
            arrival_s=arrival_s,
            priority=self.priority if priority is None else priority,
        )

    def train_config(
        self,
        diloco_h: int,
        controller: str | None,
        storage: str | None = None,
        micro_batch: int = 0,
        attempt: int = 0,
        **run,
    ) -> TrainConfig:
        """What its workers run; `run`: the run's own fields (its placement group, launch)."""
        return TrainConfig(
            job=self.name,
            storage=storage,
            shape=self.model,
            global_batch=self.global_batch,
            steps=self.steps,
            lr=self.lr,
            seed=self.seed,
            diloco_h=diloco_h,
            micro_batch=micro_batch,
            attempt=attempt,
            checkpoint_every=self.checkpoint_every,
            controller=controller,
            entrypoint=self.entrypoint,
            script=self.script,
            config=self.config,
            **run,
        )


class JobRow(BaseModel):
    """A job as `xds jobs` and `GET /jobs` show it."""

    job: str
    # queued, starting (placed, no step yet), running, moving, preempting, cancelling, and at
    # the end done, failed or cancelled
    status: str
    tenant: str
    priority: int
    entrypoint: str  # its training code (module:function, or the script)
    step: int
    steps: int
    loss: float | None
    first_loss: float | None
    domains: dict[str, int]  # workers per domain
    kind: str | None  # single (inside one domain) or data (replicas over domains)
    plan: str | None
    reason: str | None  # why the scheduler put it there
    predicted_step_s: float | None  # by the model, before any correction
    corrected_step_s: float | None  # by the model as corrected from the steps seen
    measured_step_s: float | None  # what its recent steps took (JobRecord.measured)
    # wall seconds a recent step took, what the run does between steps included
    # (JobRecord.wall_step_s): what the job's finish time follows
    wall_step_s: float | None
    attempts: int
    startup_s: float | None  # its current run's launch to first step


def load_job(path: str) -> LiveJob:
    """Read and validate a job file; UserError naming the first bad field."""
    return validated(LiveJob, read_yaml(path, "job"), str(path), "job")

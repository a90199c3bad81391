"""What a study reports, as typed records: the schema of report.json.

The parts of the engine produce these records, the study assembles them into a `Report`, and
the report writer renders them: every reader shares this one definition. Units are in the field
names (`_s`, `_h`, `_gb`, `_usd`, `_gpus`); shares are 0-1. Figures that do not exist for a run
(no job finished, no swing fired) are null. `xds run --schema` prints the JSON Schema.

Fields shown in the HTML tables carry their column (`column`): heading, the scale applied before
formatting, the format, and whether lower is better.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Figure = float | None  # null where the run has no such figure (nothing finished, no record)


def column(
    heading: str,
    description: str,
    scale: float = 1.0,
    fmt: str = "{:.3g}",
    lower_is_better: bool | None = None,
    default: Any = ...,
) -> Any:
    """A field shown as a table column in the HTML report."""
    return Field(
        default,
        description=description,
        json_schema_extra={
            "column": {
                "heading": heading,
                "scale": scale,
                "format": fmt,
                "lower_is_better": lower_is_better,
            }
        },
    )


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @classmethod
    def columns(cls) -> list[tuple[str, dict]]:
        """(field, column) of every field shown as a column, in order."""
        return [
            (name, column)
            for name, f in cls.model_fields.items()
            if isinstance(f.json_schema_extra, dict)
            and isinstance(column := f.json_schema_extra.get("column"), dict)
        ]


class Relocations(Record):
    """Moves of running jobs to other domains (state over the WAN), decided apart from the
    adjustments on their own domains."""

    count: int = column("decided", "relocations decided", fmt="{:.0f}")
    switched: int = column("switched", "relocations that reached their switch", fmt="{:.0f}")
    cancelled: int = Field(description="relocations whose target's accelerators were gone")
    by_checkpoint: int = column(
        "by checkpoint", "switched through a copied checkpoint", fmt="{:.0f}"
    )
    by_transfer: int = Field(description="switched by a paused transfer")
    transfer_s_p50: Figure = column(
        "WAN p50 (s)", "seconds the state spent on the WAN", fmt="{:.0f}"
    )
    transfer_s_max: Figure = Field(description="seconds the state spent on the WAN, largest")
    lost_s_p50: Figure = Field(description="seconds of training lost: paused, or redone")
    lost_s_max: Figure = column("lost max (s)", "seconds of training lost, largest", fmt="{:.0f}")
    lost_gpu_h: float = column(
        "lost GPU-h", "accelerator-hours held idle, loading or redoing", fmt="{:.1f}"
    )
    wan_gb: float = column("WAN GB", "state sent across domains", fmt="{:.0f}")
    wan_cost_usd: float = Field(description="its bill at the links' prices")


class Adjustments(Record):
    """Re-plans of running jobs on the domains they hold, fired by the given causes. dip: 1 −
    tokens trained from the trigger until recovery over what the rate before the swing would
    have trained; the adjustment's own dip: the same over what keeping the plan under the swing
    would have trained; recovery: until the job trains at min(new plan's rate, 90% of the rate
    before) with nothing pending."""

    count: int = column("adjustments", "adjustments fired", fmt="{:.0f}")
    recovered: int = Field(description="adjustments whose job recovered")
    dip_p50: Figure = column("dip p50", "dip, median", fmt="{:.1%}")
    dip_p99: Figure = Field(description="dip, 99th percentile")
    dip_max: Figure = column("dip max", "dip, largest", fmt="{:.1%}")
    swing_dip_p50: Figure = column(
        "of it the swing, p50",
        "what the swing alone costs (old plan under it), median",
        fmt="{:.1%}",
    )
    swing_dip_max: Figure = Field(description="what the swing alone costs, largest")
    adjustment_dip_p50: Figure = Field(description="the adjustment's own dip, median")
    adjustment_dip_p99: Figure = Field(description="the adjustment's own dip, 99th percentile")
    adjustment_dip_max: Figure = column(
        "the adjustment's own dip, max", "the adjustment's own dip, largest", fmt="{:.1%}"
    )
    recovery_s_p50: Figure = column("recovery p50 (s)", "seconds to recover, median", fmt="{:.1f}")
    recovery_s_p99: Figure = Field(description="seconds to recover, 99th percentile")
    recovery_s_max: Figure = column("recovery max (s)", "seconds to recover, largest", fmt="{:.1f}")


class Swings(Adjustments):
    """A policy's `swings` block: the adjustments load swings and RTT rises fired, and apart
    from them the relocations those led to."""

    causes: list[str] = Field(description="the triggers counted: load swings, RTT rises")
    kept_plan: int = Field(description="triggers that left the plan as it was")
    fallbacks_to_restart: int = column(
        "restarts", "adjustments that restarted instead (no room alongside)", fmt="{:.0f}"
    )
    relocations: Relocations


class Preallocation(Record):
    """Accelerators held for an announced job before it arrived."""

    arrival_s: float
    held_from_s: float
    held_gpus: int
    wanted_gpus: int
    released_s: float | None = Field(description="when the hold was given back; null: never")


class Consultation(Record):
    """One hourly consultation of the demand forecast."""

    time_s: float
    source: str = Field(description="history model, persistence, or http")
    demand_gpus: float = Field(description="running + queued accelerators now")
    mean_10m_gpus: float
    mean_1h_gpus: float
    hi95_1h_gpus: float
    known_jobs: int
    backup_pool_gpus: int = Field(description="the forecast's headroom to its 97.5% quantile")
    preallocate_gpus: int
    coming: list[str] = Field(description="announced jobs arriving within the hour")
    pools_gpus: dict[str, int] = Field(description="backup pool sizes set, by domain")


class Forecast(Record):
    """The demand forecast's use by one policy's controller."""

    consults: int
    source: list[str]
    pool_gpus_min: int
    pool_gpus_max: int
    preallocated: dict[str, Preallocation]
    timeline: list[Consultation]


class FaultSummary(Record):
    """What injected faults did in one policy's study and how its jobs recovered."""

    injected: int
    injected_by_kind: dict[str, int]
    detected: int
    jobs_hit: int
    unrecovered: int
    detection_s_p50: Figure
    detection_s_p99: Figure
    recovery_s_p50: Figure
    recovery_s_max: float
    interrupted_s_max: float
    lost_work_gpu_h: float
    backup_pool_gpus: dict[str, int]
    backup_pool_floor_gpus: dict[str, int]


class PolicyFaults(Record):
    """One policy's part of the `faults` block."""

    jobs_hit: int
    unrecovered: int
    recovery_s_p50: Figure
    recovery_s_max: float
    interrupted_s_max: float
    lost_work_gpu_h: float
    backup_pool_gpus: dict[str, int]
    forecast: Forecast | None = None


class Shards(Record):
    idle_wait_fraction: float
    blocking_rate: float


class FaultsReport(Record):
    """The `faults` block: the detectors on the run's faults and on fault-free windows, data
    movement under ±30% bandwidth swings, and recovery per policy."""

    rates: str = Field(description="the failure rates injected")
    injected: int
    injected_by_kind: dict[str, int]
    detected: int
    detection_s_p50: Figure
    detection_s_p99: Figure
    backup_pool_gpus: dict[str, int]
    false_alarms: int = Field(description="verdicts on as many fault-free windows")
    idle_wait_fraction: float = Field(description="adaptive data shards: time idle waiting")
    blocking_rate: float
    fixed_shards: Shards = Field(description="the same for fixed data shards")
    policies: dict[str, PolicyFaults]


class ClassFigures(Record):
    """One class of a study's jobs under one policy: the jobs that fit the largest domain's
    free share, or the giants that ask for more. Unfinished jobs count as in the totals."""

    jobs: int = column("jobs", "jobs of the class", fmt="{:.0f}")
    gpu_time_share: float = column(
        "GPU-time (%)",
        "their share of the offered accelerator time (work at 40% MFU)",
        100,
        "{:.1f}",
    )
    mean_jct_s: Figure = column(
        "mean JCT (h)", "their mean job completion time", 1 / 3600, "{:.2f}", True
    )
    work_efficiency: Figure = column(
        "efficiency (work)",
        "their ideal time over JCT, each capped at 1, weighted by work",
        1,
        "{:.3f}",
        False,
    )
    mean_queue_s: Figure = column(
        "mean queue (h)", "their mean wait before a first start", 1 / 3600, "{:.2f}", True
    )
    never_started: int = column(
        "never started", "jobs not started by the study's end", fmt="{:.0f}", lower_is_better=True
    )
    unfinished: int = column(
        "unfinished",
        "jobs not finished by the study's end (those never started among them)",
        fmt="{:.0f}",
        lower_is_better=True,
    )
    crossed: int = column(
        "ran across",
        "jobs that held accelerators in several data centres at once at some time (a mixed "
        "domain's pools are one)",
        fmt="{:.0f}",
    )


class PolicyMetrics(Record):
    """One policy over the study: times, utilisation, WAN traffic, decisions, the objective."""

    mean_jct_s: Figure = column(
        "mean JCT (h)",
        "mean job completion time; an unfinished job "
        "counts the least it could still reach: its time so far plus "
        "what it has left at its ideal speed (a lower bound: a job "
        "a policy would never start counts as if it started at the "
        "study's end; see jobs_never_started)",
        1 / 3600,
        "{:.2f}",
        True,
    )
    p95_jct_s: Figure = column(
        "p95 JCT (h)", "95th percentile of job completion time", 1 / 3600, "{:.2f}", True
    )
    mean_slowdown: Figure = column(
        "mean slowdown",
        "JCT over the job's ideal time (the whole cluster, as leased, to itself)",
        1,
        "{:.2f}",
        True,
    )
    p95_slowdown: Figure = Field(description="95th percentile of the slowdown")
    makespan_s: Figure = column(
        "makespan (h)",
        "until the last job finished (the study's end if one did not)",
        1 / 3600,
        "{:.1f}",
        True,
    )
    useful_utilization: float = column(
        "useful util. (%)",
        "model FLOPs trained while jobs arrive over the peak of every accelerator then",
        100,
        "{:.1f}",
        False,
    )
    allocated_utilization: float = column(
        "allocated (%)",
        "share of accelerators held by the study's jobs while jobs arrive",
        100,
        "{:.1f}",
    )
    gpu_h_per_job: float = column(
        "GPU-h per job", "accelerator-hours held per job", 1, "{:,.0f}", True
    )
    mean_queue_s: Figure = column(
        "mean queue (h)", "mean wait before a job first started", 1 / 3600, "{:.2f}", True
    )
    jobs_completed: int = column("jobs done", "jobs finished", 1, "{:.0f}", False)
    jobs_total: int
    jobs_unfinished: int = column(
        "unfinished",
        "jobs not finished when the study ended (the queue drains for 3x the arrival window)",
        1,
        "{:.0f}",
        True,
    )
    jobs_never_started: int = column(
        "never started",
        "jobs that never held an accelerator before the study ended",
        1,
        "{:.0f}",
        True,
    )
    cross_domain_gb: float = column(
        "WAN traffic (GB)", "bytes sent across domains", 1, "{:,.0f}", True
    )
    cross_domain_cost_usd: float = column(
        "WAN cost ($)", "their bill at the links' prices", 1, "{:,.2f}", True
    )
    decision_ms_p50: Figure = column(
        "decision p50 (ms)", "time to decide a placement, median", 1, "{:.2f}", True
    )
    decision_ms_p99: Figure = column(
        "decision p99 (ms)", "time to decide a placement, 99th percentile", 1, "{:.2f}", True
    )
    decisions: int
    replans: int
    requeues: int
    rejected_samples: int = Field(description="indicator samples that failed their checks")
    domains_down: list[str]
    mean_efficiency: float = Field(
        description="jobs' ideal time over their JCT (at most 1), a plain mean over jobs"
    )
    work_efficiency: float = Field(
        description="the same weighted by each job's work (model "
        "FLOPs): a job starved weighs what it asked for"
    )
    wan_cost_over_gpu_cost: float
    objective_work: Figure = column(
        "R (work)",
        "R with the scenario's weights: w1 efficiency "
        "weighted by work + w2 useful utilisation - w3 WAN cost "
        "over accelerator cost",
        1,
        "{:.3f}",
        False,
    )
    objective: Figure = column(
        "R (per job)",
        "R as before, its efficiency a plain mean over jobs (kept beside R (work) for one release)",
        1,
        "{:.3f}",
        False,
    )
    free_share_gpus: float = Field(
        0.0,
        description="the largest domain's accelerators less "
        "what other tenants held there on average while jobs "
        "arrived: a job asking for more is a giant",
    )
    classes: dict[str, ClassFigures] = Field(
        default_factory=dict,
        description="the jobs that fit the largest domain's free share "
        "('fit') and the giants that ask for more ('giant')",
    )
    prediction_error_p50: Figure = column(
        "prediction error p50",
        "|predicted / true - 1| of the throughput of each placement a "
        "job ran on, median: the policy's model as corrected by the rates it observed (null: "
        "the model was the truth)",
        1,
        "{:.1%}",
        True,
        default=None,
    )
    prediction_error_p90: Figure = Field(None, description="the same, 90th percentile")
    prediction_bias: Figure = Field(
        None,
        description="predicted / true - 1, mean (positive: predicted faster than the jobs ran)",
    )
    uncorrected_error_p50: Figure = column(
        "uncorrected p50",
        "the same placements as the nominal model, without the corrections, predicts them: median",
        1,
        "{:.1%}",
        True,
        default=None,
    )
    uncorrected_error_p90: Figure = Field(None, description="the nominal model's, 90th percentile")
    uncorrected_bias: Figure = Field(None, description="the nominal model's, mean")
    wall_s: float = Field(description="wall-clock seconds the policy's study took")


class TenantFigures(Record):
    """One tenant under one policy: its quota, what it used, borrowed and lent, how its jobs
    fared, and its bill."""

    quota: dict[str, int] = Field(description="nominal quota per accelerator class ('all': any)")
    cohort: str | None = Field(description="the cohort it lends to and borrows from")
    weight: float = Field(description="its fair-share weight")
    jobs: int = Field(description="its jobs in the study")
    admitted: int = Field(description="of them, started at least once")
    completed: int = Field(description="of them, finished")
    preempted: int = Field(description="preemptions of its jobs")
    lost_gpu_h: float = Field(description="accelerator-hours of work its jobs lost to preemption")
    mean_wait_s: Figure = Field(
        description="mean time from arrival to first start (to the "
        "study's end for a job never started)"
    )
    use_gpu_h: float = Field(description="accelerator-hours its jobs held")
    borrowed_gpu_h: float = Field(description="of them, beyond its nominal 'all' quota")
    lent_gpu_h: float = Field(description="accelerator-hours of its idle quota others used")
    accelerators_usd: float = Field(description="its jobs' accelerator-time at each domain's price")
    wan_usd: float = Field(description="its jobs' WAN traffic at the links' prices")
    bill_usd: float = Field(description="accelerators and WAN together")


class PolicyReport(PolicyMetrics):
    """A policy's entry in report.json."""

    single_domain: bool = Field(description="the policy never places a job across domains")
    swings: Swings
    forecast: Forecast | None = Field(
        None, description="the demand forecast's use, in a study without faults"
    )
    tenants: dict[str, TenantFigures] | None = Field(
        None, description="per tenant, in a scenario with tenancy"
    )


class GroundTruth(Record):
    """The speeds the study's jobs really ran at, against the model (sim.truth)."""

    speed_factor: dict[str, float] = Field(
        description="per domain: sustained compute over the model's"
    )
    goodput_factor: dict[str, float] = Field(
        description="per link a-b: WAN goodput over the model's"
    )
    jitter_p50: Figure = Field(description="jobs' mean step over the model's step, median")
    jitter_max: Figure = Field(description="the same, largest")


class Change(Record):
    """A policy against the baseline, as relative changes (negative: lower)."""

    mean_jct_s: Figure
    useful_utilization: Figure
    cross_domain_cost_usd: Figure
    objective: Figure
    objective_work: Figure = None


class Comparison(Record):
    """Every policy against the strongest single-domain policy of the run, by R (work)."""

    baseline: str | None = Field(
        description="the single-domain policy with the highest "
        "R (work); null where the run has none"
    )
    policies: dict[str, Change]


class Report(Record):
    """report.json."""

    scenario: str
    seed: int
    hours: float
    jobs: int
    offered_load: float = Field(
        description="accelerator-hours the jobs ask for over those the "
        "cluster has while they arrive (work at 40% MFU)"
    )
    background_load: float = Field(
        description="share of the accelerators other tenants hold meanwhile, on average"
    )
    runtime: Literal["local", "ray"]
    weights: dict[str, float]
    policies: dict[str, PolicyReport]
    comparison: Comparison
    faults: FaultsReport | None = None
    truth: GroundTruth | None = Field(
        None, description="what the jobs really ran at; null: the model itself"
    )

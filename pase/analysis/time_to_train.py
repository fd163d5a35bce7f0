"""Time, energy and money to train a plan, with failures, restarts and checkpoints.

:mod:`pase.analysis.throughput` gives the failure-free time to train (``N /
tokens per second``). At scale the answer also depends on failures: Llama 3's
405B pre-training saw 466 job interruptions in a 54-day snapshot on up to
16,384 H100s, 419 of them unexpected (about 78% hardware), and still kept more
than 90% effective training time (Meta, "The Llama 3 Herd of Models", 2024,
section 3.3.4). This module adds what those cost.

The model
---------
* **Failures** arrive as a Poisson process while the job runs, at
  ``interruptions_per_gpu_hour x devices`` per hour (every device is a part in
  series, as Kokolis et al., "Revisiting Reliability in Large-Scale Machine
  Learning Research Clusters", 2024, model a job: its mean time to failure
  falls as ``1 / devices``). Each failure rolls the job back to its last
  *durable* checkpoint and costs a restart of ``restart_s`` (rescheduling,
  re-initialising) plus reading the checkpoint back; no failure strikes during
  a restart.
* **A checkpoint** holds the weights and optimizer state of the plan, as the
  plan shards them (:func:`checkpoint_size`; gradients and activations are not
  saved). A block replicated over data-parallel (or context-parallel) ranks is
  written once, its replicas sharing the writing (PyTorch DCP and Megatron's
  distributed checkpoints deduplicate replicas). Writing takes
  ``max(total / storage_Bps, largest per-device share / storage_per_device_Bps)``:
  the file system's aggregate rate or one device's share of its node's storage
  network, whichever binds. Reading it back on restart takes as long.
* **Synchronous** checkpoints stop training for the whole write.
  **Asynchronous** ones (PyTorch DCP's ``async_save``, Megatron's async save)
  stop it only to copy each device's share to host memory over its host link
  (``host_Bps``), then write in the background; a checkpoint is durable only
  once written, so a failure during the write rolls back one checkpoint
  further. The interval must then be at least the write time.
* **Goodput** is useful training time over wall time. For checkpoints every
  ``tau`` seconds of work, a pause ``C`` each, a write lag ``L`` (0 when
  synchronous), a restart ``R`` and a failure rate ``lambda``, the expected
  wall time between two durable checkpoints is (a renewal argument; the
  classical result of Daly 2006 when ``L = 0``)::

      E = (1 - exp(-lambda w)) (1 / lambda + R + E_fresh(w + L)),   w = tau + C
      E_fresh(x) = (1 / lambda + R) (exp(lambda x) - 1)

  and goodput is ``tau / E``. :func:`optimal_interval` maximises it over
  whole numbers of steps; :func:`young_daly_interval` is the first-order
  optimum ``sqrt(2 C M)`` (Young 1974; Daly 2006), ``M = 1 / lambda``.
* **Wall time** is the failure-free time over the goodput; **GPU-hours** are
  wall hours times devices (every device is held through failures and
  restarts); expected interruptions are ``lambda x`` the time the job runs
  (``wall / (1 + lambda R)``, restarts excluded).
* **Energy**: every device draws its board power (the published TDP of the
  preset's GPU, :data:`GPU_SPECS`) times ``power_fraction`` for the whole
  wall time, plus ``node_overhead_W`` per node (CPUs, NICs, switches, fans:
  the DGX system's published maximum less its GPUs). The utilisation model is
  deliberately simple: ``power_fraction = 1`` (the default) prices a
  training load at its power cap, an upper bound that ignores idle time in
  restarts and pipeline bubbles; data-centre overhead (PUE) is not included.
* **Cost**: GPU-hours times a price per GPU-hour. There is no default price:
  without one the cost is None.

Where Young-Daly's assumptions break
------------------------------------
``sqrt(2 C M)`` assumes the checkpoint cost is small against the mean time
between failures (``C << M``; the first-order expansion is off by the order of
``sqrt(C / M)``, and meaningless once ``C`` nears ``M / 2``), a restart that is
negligible or at least independent of the interval, exponential (memoryless)
failures, and independent failures. Real clusters break the last two: failures
cluster in time (a bad node fails again after a restart; Kokolis et al. find
"lemon" nodes), infant mortality after maintenance makes the hazard fall with
time (a Weibull shape below 1), and one fault (a switch, a power domain) takes
down many devices at once. :func:`optimal_interval` optimises the exact
expected-time formula instead, which holds for any ``C`` and ``R`` but keeps
the exponential, independent failures; the report says when ``C`` or ``R`` is
large against ``M`` (``notes``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from numbers import Real

from pase.analysis.throughput import ThroughputError, batch_size, sequence_length

# Plans are taken as pase.planner.Plan or pase.model.training.TrainingPlan without importing them (duck typed:
# a TrainingPlan has ``stages``), so that this module stays below both.

__all__ = [
    "LLAMA3_INTERRUPTIONS_PER_GPU_HOUR", "DEFAULT_RESTART_S", "DEFAULT_STORAGE_BPS", "DEFAULT_STORAGE_PER_DEVICE_BPS",
    "GPU_SPECS", "GpuSpec", "FailureModel", "PowerModel", "CheckpointSize", "TimeToTrain",
    "checkpoint_size", "time_to_train", "time_to_train_job", "expected_segment_s", "goodput",
    "optimal_interval", "young_daly_interval", "SWEEP_FIELDS", "with_time_to_train", "scale_sweep",
]

# Llama 3 (Meta 2024, section 3.3.4, Table 5): 419 unexpected interruptions in a 54-day snapshot of pre-training
# on 16,384 H100s. The 47 planned ones (maintenance) are left out: they checkpoint first and lose no work.
LLAMA3_UNEXPECTED_INTERRUPTIONS, LLAMA3_GPUS, LLAMA3_DAYS = 419, 16384, 54
LLAMA3_INTERRUPTIONS_PER_GPU_HOUR = LLAMA3_UNEXPECTED_INTERRUPTIONS / (LLAMA3_GPUS * LLAMA3_DAYS * 24)
# An assumption, not a published figure: Llama 3's >90% effective training time with 466 interruptions in 54 days
# leaves at most 54 x 86,400 x 0.1 / 466 = 1,001 s (about 17 min) lost per interruption, restart, lost work and
# checkpoints together; 10 minutes of restart is consistent with that.
DEFAULT_RESTART_S = 600.0
# Llama 3 (section 3.3.1): Meta's Tectonic file system sustains 2 TB/s (7 TB/s peak) for the training cluster.
DEFAULT_STORAGE_BPS = 2e12
# One device's share of its node's storage network: a DGX H100's two 400 Gb/s storage ConnectX-7 ports
# (100 GB/s) over its 8 GPUs (NVIDIA DGX H100 datasheet).
DEFAULT_STORAGE_PER_DEVICE_BPS = 12.5e9


@dataclass(frozen=True)
class GpuSpec:
    """Published figures of a preset's GPU: board power (W), node overhead (W), host link (bytes/s), source."""

    board_W: float
    node_overhead_W: float | None
    host_Bps: float
    source: str


# Board power: the GPU's published TDP. Node overhead: the DGX system's published maximum power less its
# 8 GPUs' board power (None: no system figure). Host link: PCIe per direction (Gen3 x16 16 GB/s, Gen4 32, Gen5 64).
GPU_SPECS: dict[str, GpuSpec] = {
    "paper-1080ti": GpuSpec(250.0, None, 16e9, "GTX 1080 Ti: 250 W board power (NVIDIA spec); PCIe 3.0 x16"),
    "paper-2080ti": GpuSpec(250.0, None, 16e9, "RTX 2080 Ti: 250 W board power (NVIDIA reference spec); PCIe 3.0 x16"),
    "dgx1-v100": GpuSpec(300.0, 3500.0 - 8 * 300.0, 16e9,
                         "V100 SXM2: 300 W; DGX-1 3.5 kW max (NVIDIA datasheets); PCIe 3.0 x16"),
    "dgx-a100": GpuSpec(400.0, 6500.0 - 8 * 400.0, 32e9,
                        "A100 SXM: 400 W; DGX A100 6.5 kW max (NVIDIA datasheets); PCIe 4.0 x16"),
    "dgx-a100-40gb": GpuSpec(400.0, 6500.0 - 8 * 400.0, 32e9,
                             "A100 SXM: 400 W; DGX A100 6.5 kW max (NVIDIA datasheets); PCIe 4.0 x16"),
    "dgx-h100": GpuSpec(700.0, 10200.0 - 8 * 700.0, 64e9,
                        "H100 SXM: 700 W; DGX H100 10.2 kW max (NVIDIA datasheets); PCIe 5.0 x16"),
    "dgx-h200": GpuSpec(700.0, 10200.0 - 8 * 700.0, 64e9,
                        "H200 SXM: 700 W; DGX H200 10.2 kW max (NVIDIA datasheets); PCIe 5.0 x16"),
    "dgx-b200": GpuSpec(1000.0, 14300.0 - 8 * 1000.0, 64e9,
                        "B200: 1,000 W; DGX B200 14.3 kW max (NVIDIA datasheets); PCIe 5.0 x16"),
}
# Without a preset: the most common host link today (PCIe 5.0 x16, 64 GB/s per direction).
_DEFAULT_HOST_BPS = 64e9


class _Error(ThroughputError):
    """Raised for a bad failure, power or price figure (a :class:`ThroughputError`: one line, naming the fix)."""


def _positive(name: str, value, fix: str, *, zero: bool = False) -> float:
    """``value`` as a float, or ``ThroughputError`` naming ``name``, the value and ``fix``."""
    ok = (not isinstance(value, bool) and isinstance(value, Real) and math.isfinite(value)
          and (value >= 0 if zero else value > 0))
    if not ok:
        sign = ">= 0" if zero else "> 0"
        raise _Error(f"{name} must be a finite number {sign}, got {value!r}: {fix}")
    return float(value)


@dataclass(frozen=True)
class FailureModel:
    """How a job fails, checkpoints and restarts (defaults and their sources: the module's docstring).

    Parameters
    ----------
    interruptions_per_gpu_hour : float
        Failures per device per hour of running (default: Llama 3's 419
        unexpected interruptions over 54 days x 16,384 GPUs, 1.97e-5).
    restart_s : float
        Seconds from a failure to training again, the checkpoint read excluded (default 600).
    storage_Bps : float
        Aggregate write (and read) rate of the file system, bytes/s (default 2 TB/s).
    storage_per_device_Bps : float
        One device's share of its node's storage network, bytes/s (default 12.5 GB/s).
    async_checkpoint : bool
        Write in the background after a copy to host memory (default: synchronous).
    host_Bps : float or None
        Device-to-host copy rate of an asynchronous checkpoint, bytes/s (None: the preset's PCIe link).
    interval_s : float or None
        Checkpoint every this many seconds of work (rounded to whole steps); None: the optimum.

    Raises
    ------
    ThroughputError
        A rate, bandwidth or time that is not a finite positive number (``restart_s`` may be 0).
    """

    interruptions_per_gpu_hour: float = LLAMA3_INTERRUPTIONS_PER_GPU_HOUR
    restart_s: float = DEFAULT_RESTART_S
    storage_Bps: float = DEFAULT_STORAGE_BPS
    storage_per_device_Bps: float = DEFAULT_STORAGE_PER_DEVICE_BPS
    async_checkpoint: bool = False
    host_Bps: float | None = None
    interval_s: float | None = None

    def __post_init__(self):
        _positive("the interruption rate per GPU-hour", self.interruptions_per_gpu_hour,
                  "give failures per device per hour, e.g. 2e-5 (Llama 3's)")
        _positive("the restart time", self.restart_s, "give seconds (0 for none)", zero=True)
        _positive("the storage bandwidth", self.storage_Bps, "give the file system's bytes/s, e.g. 2e12")
        _positive("the per-device storage bandwidth", self.storage_per_device_Bps, "give bytes/s, e.g. 12.5e9")
        if self.host_Bps is not None:
            _positive("the host copy bandwidth", self.host_Bps, "give bytes/s, e.g. 64e9 (PCIe 5.0 x16)")
        if self.interval_s is not None:
            _positive("the checkpoint interval", self.interval_s, "give seconds, or leave it out for the optimum")


@dataclass(frozen=True)
class PowerModel:
    """What the devices draw (see the module's energy model).

    ``gpu_W`` None: the preset's published board power (:data:`GPU_SPECS`);
    ``node_overhead_W`` None: the preset's DGX figure (0 where it has none);
    ``power_fraction``: the share of board power drawn on average (default 1).

    Raises
    ------
    ThroughputError
        A power that is not a finite positive number (the overhead may be 0), a fraction outside (0, 1].
    """

    gpu_W: float | None = None
    node_overhead_W: float | None = None
    power_fraction: float = 1.0

    def __post_init__(self):
        if self.gpu_W is not None:
            _positive("the GPU power", self.gpu_W, "give watts per device, e.g. 700 (H100 SXM)")
        if self.node_overhead_W is not None:
            _positive("the per-node overhead", self.node_overhead_W, "give watts per node (0 for none)", zero=True)
        f = _positive("the power fraction", self.power_fraction, "give a share of board power in (0, 1]")
        if f > 1:
            raise _Error(f"the power fraction must be at most 1, got {f!r}: give a share of board power in (0, 1]")


@dataclass(frozen=True)
class CheckpointSize:
    """What one checkpoint holds, in bytes.

    ``total_bytes``: every distinct block once (weights and optimizer state);
    ``per_device_bytes``: the largest share one device writes (its stage's
    distinct state over the stage's devices); ``held_per_device_bytes``: the
    most weights and optimizer state one device holds (replicas included).
    """

    total_bytes: float
    per_device_bytes: float
    held_per_device_bytes: float


def checkpoint_size(plan, parameters: int | None = None, memory=None) -> CheckpointSize:
    """The weights and optimizer state a checkpoint of ``plan`` holds, as the plan shards them.

    A 3-D plan (:class:`pase.model.training.TrainingPlan`): per pipeline
    position, a device holds ``weights_bytes + optimizer_bytes``
    (:class:`~pase.model.training.StageReport`: the weights replicated over the
    ``c`` context ranks and, below ZeRO 3, the ``d`` data-parallel replicas;
    the optimizer state sharded over ``d`` from ZeRO 1). Each position's
    distinct state is written once, shared evenly by its ``t c d`` devices.
    Its distinct state counts the weights as split over the ``t`` tensor ranks
    (Megatron's rule); given the graph's ``parameters`` (tied weights once),
    the total is exactly ``parameters`` times the bytes per parameter of
    weights and optimizer state (``memory``, a
    :class:`~pase.model.memory.MemoryOptions`, default the default's; what
    the tensor ranks replicate, such as norm scales, is then written once),
    spread over the positions in those proportions.

    A per-layer plan (:class:`pase.planner.Plan`): the graph's parameters
    times those bytes per parameter, shared evenly by all devices.

    Raises
    ------
    ThroughputError
        ``parameters`` is not a positive whole number.
    """
    from pase.model.memory import MemoryOptions  # late: pase.model imports widely

    per_param = (memory or MemoryOptions()).bytes_per_parameter(plan.cluster.bytes_per_element)
    state_per_param = per_param["weights"] + per_param["optimizer"]
    stages = getattr(plan, "stages", None)
    if stages is None:
        return _layer_plan_checkpoint(plan, state_per_param)
    par = plan.parallelism
    group = par.tensor * par.context * par.data  # devices per pipeline position
    weights_copies = par.context * (1 if par.zero >= 3 else par.data)
    optimizer_copies = par.context * (1 if par.zero >= 1 else par.data)
    distinct = [s.weights_bytes * group / weights_copies + s.optimizer_bytes * group / optimizer_copies
                for s in stages]
    held = max(s.weights_bytes + s.optimizer_bytes for s in stages)
    if parameters is not None:
        total = _positive("the parameter count", parameters, "give the graph's parameter_count") * state_per_param
        distinct = [x * total / sum(distinct) for x in distinct]
    return CheckpointSize(total_bytes=float(sum(distinct)), per_device_bytes=max(distinct) / group,
                          held_per_device_bytes=held)


def _layer_plan_checkpoint(plan, state_per_param: int) -> CheckpointSize:
    """:func:`checkpoint_size` of a per-layer plan: what its memory report holds per device, if it has one."""
    total = float(plan.graph.parameter_count * state_per_param)
    held = total if plan.memory is None else float(
        sum(r.weights_bytes + r.optimizer_bytes for r in plan.memory.layers))
    return CheckpointSize(total_bytes=total, per_device_bytes=total / plan.cluster.devices, held_per_device_bytes=held)


# -- the goodput model -----------------------------------------------------------------------------------------


def _expected_fresh_s(length_s: float, rate: float, restart_s: float) -> float:
    """Expected wall seconds to run ``length_s`` without a failure, from a fresh start, each failure costing
    what ran since the start plus ``restart_s``: ``(1 / rate + R) (exp(rate L) - 1)``; inf on overflow."""
    x = rate * length_s
    return math.inf if x > 700 else (1.0 / rate + restart_s) * math.expm1(x)


def expected_segment_s(interval_s: float, pause_s: float, restart_s: float, rate_per_s: float,
                       lag_s: float = 0.0) -> float:
    """Expected wall seconds between two durable checkpoints (the module's formula for ``E``).

    ``interval_s`` of work then a ``pause_s`` stop; a checkpoint becomes
    durable ``lag_s`` after its pause ends (0: synchronous); failures at
    ``rate_per_s`` while running, each followed by ``restart_s``. Returns inf
    when a segment can practically never complete.

    Raises
    ------
    ThroughputError
        A non-positive interval or rate, a negative pause, restart or lag.
    """
    tau = _positive("the checkpoint interval", interval_s, "give seconds of work between checkpoints")
    rate = _positive("the failure rate", rate_per_s, "give failures per second")
    c = _positive("the checkpoint pause", pause_s, "give seconds", zero=True)
    r = _positive("the restart time", restart_s, "give seconds", zero=True)
    lag = _positive("the checkpoint write lag", lag_s, "give seconds", zero=True)
    w = tau + c
    fail = -math.expm1(-rate * w)  # P(a failure before the segment ends)
    rest = _expected_fresh_s(w + lag, rate, r)
    if math.isinf(rest):
        return math.inf
    # From one checkpoint's durability to the next's: ``w`` of running (the lag's work at either end belongs to
    # neighbouring segments). Until the first failure or the end, E[min(X, w)] = fail / rate; after a failure, a
    # restart, then the segment again from its start plus the lag before its checkpoint is durable.
    return fail / rate + fail * (r + rest)


def goodput(interval_s: float, pause_s: float, restart_s: float, rate_per_s: float, lag_s: float = 0.0) -> float:
    """Useful work over wall time, ``interval_s / expected_segment_s(...)`` (0 when a segment never completes).

    >>> round(goodput(3600.0, 60.0, 0.0, 1e-9), 4)  # almost no failures: only the pauses cost
    0.9836
    """
    e = expected_segment_s(interval_s, pause_s, restart_s, rate_per_s, lag_s)
    return 0.0 if math.isinf(e) else interval_s / e


def young_daly_interval(pause_s: float, mtbf_s: float) -> float:
    """The first-order optimal work between checkpoints, ``sqrt(2 C M)`` seconds (Young 1974; Daly 2006).

    Valid only while ``C << M`` (see the module's notes).

    >>> young_daly_interval(2.0, 3600.0)
    120.0
    """
    return math.sqrt(2.0 * _positive("the checkpoint pause", pause_s, "give seconds")
                     * _positive("the mean time between failures", mtbf_s, "give seconds"))


def optimal_interval(step_s: float, pause_s: float, restart_s: float, rate_per_s: float, lag_s: float = 0.0,
                     ) -> int:
    """The whole number of steps between checkpoints that maximises :func:`goodput` (at least 1, and at least
    ``lag_s`` of work when asynchronous, so that writes never queue).

    Goodput is unimodal in the interval (pauses cost less as it grows, lost
    work more), so a golden-section search on its logarithm finds the
    continuous optimum; the neighbouring whole steps are compared exactly.
    """
    step = _positive("the step time", step_s, "give seconds per step")
    lowest = max(1, math.ceil(lag_s / step - 1e-9))

    def score(k: float) -> float:
        return goodput(k * step, pause_s, restart_s, rate_per_s, lag_s)

    lo, hi = math.log(lowest), math.log(max(lowest * 4.0, 100.0 / (rate_per_s * step)))
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = score(math.exp(a)), score(math.exp(b))
    for _ in range(100):
        if fa >= fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = score(math.exp(a))
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = score(math.exp(b))
    best = math.exp((lo + hi) / 2)
    candidates = {max(lowest, math.floor(best)), max(lowest, math.ceil(best)), lowest}
    return max(sorted(candidates), key=score)


# -- time, energy and cost to train ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TimeToTrain:
    """Time, energy and money to train on ``amount`` ``unit``, failures and checkpoints included.

    Times in seconds (``wall_days`` in days), energy in MWh, ``cost`` in the
    price's currency (None without a price). ``checkpoint_pause_s``: how long
    training stops for a checkpoint; ``recovery_s``: a failure's restart plus
    reading the checkpoint back; ``checkpoint_interval_s``: work between
    checkpoints (``checkpoint_interval_steps`` whole steps). ``assumptions`` lists each
    figure used with its source; ``notes`` say where the model is stretched.
    """

    amount: float
    unit: str
    steps: float
    step_time_s: float
    devices: int
    failure_free_s: float
    wall_s: float
    wall_days: float
    gpu_hours: float
    goodput: float
    expected_interruptions: float
    interruptions_per_day: float
    mtbf_s: float
    checkpoint_bytes: float
    checkpoint_bytes_per_device: float
    checkpoint_write_s: float
    checkpoint_pause_s: float
    recovery_s: float
    checkpoint_interval_s: float
    checkpoint_interval_steps: int
    young_daly_interval_s: float
    energy_MWh: float | None
    average_power_MW: float | None
    cost: float | None
    price_per_gpu_hour: float | None
    assumptions: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """Plain, JSON-ready fields (the ``time_to_train`` object of ``pase solve --train-tokens --json``)."""
        d = asdict(self)
        d["notes"] = list(self.notes)
        return d


def time_to_train(plan, *, tokens: float | None = None, samples: float | None = None, steps: float | None = None,
                  failures: FailureModel = FailureModel(), power: PowerModel = PowerModel(),
                  price_per_gpu_hour: float | None = None, parameters: int | None = None) -> TimeToTrain:
    """:func:`time_to_train_job` of ``plan`` (a per-layer :class:`~pase.planner.Plan` or a 3-D
    :class:`~pase.model.training.TrainingPlan`) on ``tokens``, ``samples`` or ``steps``; ``parameters``: the
    graph's parameter count, for the exact checkpoint size of a 3-D plan (:func:`checkpoint_size`).

    Raises
    ------
    ThroughputError
        Not exactly one amount, a non-positive amount, a plan whose step
        takes 0 s, tokens for a model without a sequence (or tokens or
        samples without a batch), a bad price, or the errors of
        :func:`time_to_train_job`.
    """
    given = [(u, a) for u, a in (("tokens", tokens), ("samples", samples), ("steps", steps)) if a is not None]
    if len(given) != 1:
        raise _Error("give exactly one of tokens, samples or steps to train on")
    (unit, amount), = given
    training = getattr(plan, "stages", None) is not None
    name = plan.graph_name if training else plan.graph.name
    samples_per_step = plan.parallelism.global_batch if training else batch_size(plan.graph)
    seq = plan.tokens_per_sample if training else sequence_length(plan.graph)
    devices = plan.parallelism.devices if training else plan.cluster.devices
    if unit != "steps" and samples_per_step is None:
        raise _Error(f"{name!r} has no batch dimension 'b': samples per step are unknown; train for steps instead")
    if unit == "tokens" and seq is None:
        raise _Error(f"{name!r} has no sequence dimension 's': train on samples instead")
    per_step = {"tokens": (samples_per_step or 0) * (seq or 0), "samples": samples_per_step, "steps": 1}[unit]
    return time_to_train_job(
        plan.step_time_s, per_step, devices, checkpoint_size(plan, parameters), amount=amount, unit=unit,
        cluster_name=plan.cluster.name, devices_per_node=plan.cluster.devices_per_node,
        failures=failures, power=power, price_per_gpu_hour=price_per_gpu_hour)


def time_to_train_job(step_time_s: float, per_step: float, devices: int, checkpoint: CheckpointSize, *,
                      amount: float, unit: str = "tokens", cluster_name: str = "", devices_per_node: int | None = None,
                      failures: FailureModel = FailureModel(), power: PowerModel = PowerModel(),
                      price_per_gpu_hour: float | None = None) -> TimeToTrain:
    """Time, energy and cost to train on ``amount`` ``unit`` at ``per_step`` of them a step of ``step_time_s``.

    ``checkpoint``: :func:`checkpoint_size`. ``cluster_name`` picks the
    published GPU figures of :data:`GPU_SPECS` where ``power`` and
    ``failures`` leave them out; without them (a custom cluster) energy is
    None unless ``power.gpu_W`` is given. ``devices_per_node`` None: one node.

    Raises
    ------
    ThroughputError
        A non-positive or non-finite step time, amount, per-step amount or
        device count; a price that is not a number >= 0; a checkpoint
        interval shorter than an asynchronous write.

    Examples
    --------
    >>> ckpt = CheckpointSize(total_bytes=1e12, per_device_bytes=1e9, held_per_device_bytes=2e9)
    >>> t = time_to_train_job(1.0, 1e6, 1024, ckpt, amount=1e12, cluster_name="dgx-h100", devices_per_node=8)
    >>> round(t.failure_free_s / 86400, 2), 0.9 < t.goodput < 1.0, t.cost is None
    (11.57, True, True)
    """
    step = _positive("the step time", step_time_s, "a plan that takes no time cannot be trained for longer")
    amount = _positive(f"the {unit} to train on", amount, f"give a positive number of {unit}, e.g. 1e12")
    per_step = _positive(f"{unit} per step", per_step, "the plan's batch must be positive")
    _positive("the device count", devices, "give a whole number of devices >= 1")
    devices = int(devices)
    if price_per_gpu_hour is not None:
        price_per_gpu_hour = _positive("the price per GPU-hour", price_per_gpu_hour,
                                       "give a number >= 0 in any currency, or leave it out", zero=True)
    spec = GPU_SPECS.get(cluster_name)
    steps = amount / per_step
    work_s = steps * step

    # Checkpoint: write and read times, and the pause training takes for it.
    write_s = max(checkpoint.total_bytes / failures.storage_Bps,
                  checkpoint.per_device_bytes / failures.storage_per_device_Bps)
    host_Bps = failures.host_Bps or (spec.host_Bps if spec else _DEFAULT_HOST_BPS)
    pause_s = checkpoint.per_device_bytes / host_Bps if failures.async_checkpoint else write_s
    lag_s = write_s if failures.async_checkpoint else 0.0
    recovery_s = failures.restart_s + write_s  # rescheduling, then reading the checkpoint back
    rate = failures.interruptions_per_gpu_hour * devices / 3600.0
    mtbf_s = 1.0 / rate

    if failures.interval_s is None:
        k = optimal_interval(step, pause_s, recovery_s, rate, lag_s)
    else:
        k = max(1, round(failures.interval_s / step))
        if k * step < lag_s * (1 - 1e-9):
            raise _Error(f"a checkpoint every {k * step:.3g} s of work is shorter than its asynchronous write "
                         f"({lag_s:.3g} s): checkpoint less often, or synchronously")
    interval_s = k * step
    g = goodput(interval_s, pause_s, recovery_s, rate, lag_s)
    wall_s = math.inf if g == 0 else work_s / g
    if not math.isfinite(wall_s):
        raise _Error(f"at {devices:,} devices a failure comes every {mtbf_s:.3g} s on average, too often to "
                     f"ever finish a {interval_s:.3g} s checkpoint interval; lower the interruption rate or "
                     "the devices")
    interruptions = rate * wall_s / (1.0 + rate * recovery_s)
    gpu_hours = wall_s * devices / 3600.0

    gpu_W = power.gpu_W if power.gpu_W is not None else (spec.board_W if spec else None)
    node_W = power.node_overhead_W if power.node_overhead_W is not None else (
        spec.node_overhead_W if spec and spec.node_overhead_W is not None else 0.0)
    nodes = math.ceil(devices / (devices_per_node or devices))
    watts = None if gpu_W is None else devices * gpu_W * power.power_fraction + nodes * node_W
    energy_MWh = None if watts is None else watts * wall_s / 3.6e9

    notes = []
    if pause_s > mtbf_s / 20:
        notes.append(f"the checkpoint pause ({pause_s:.3g} s) is over a twentieth of the mean time between "
                     f"failures ({mtbf_s:.3g} s): Young-Daly's sqrt(2 C M) is off here; the interval is the exact "
                     "model's optimum")
    if recovery_s > mtbf_s / 20:
        notes.append(f"recovery ({recovery_s:.3g} s a failure) is over a twentieth of the mean time between failures "
                     f"({mtbf_s:.3g} s): whatever the interval, goodput stays below 1 / (1 + recovery / MTBF) = "
                     f"{1 / (1 + recovery_s / mtbf_s):.3f}")
    if k == 1 and failures.interval_s is None:
        notes.append("the optimal interval is under one step: a checkpoint after every step")
    if gpu_W is None:
        notes.append(f"no published board power for cluster {cluster_name!r}: give the GPU power for energy")
    if price_per_gpu_hour is None:
        notes.append("no price per GPU-hour given, so no cost (pase has no default price)")
    notes.append("failures assumed independent and exponential (memoryless); correlated failures and "
                 "post-maintenance infant mortality make real goodput lower")

    assumptions = {
        "interruptions_per_gpu_hour": failures.interruptions_per_gpu_hour,
        "interruptions_source": ("Llama 3 (Meta 2024, section 3.3.4): 419 unexpected interruptions in 54 days on "
                                 "16,384 H100s" if failures.interruptions_per_gpu_hour
                                 == LLAMA3_INTERRUPTIONS_PER_GPU_HOUR else "given"),
        "restart_s": failures.restart_s,
        "restart_source": ("assumption: 10 min, consistent with Llama 3's >90% effective training time"
                           if failures.restart_s == DEFAULT_RESTART_S else "given"),
        "storage_Bps": failures.storage_Bps,
        "storage_source": ("Llama 3 (section 3.3.1): Tectonic sustains 2 TB/s"
                           if failures.storage_Bps == DEFAULT_STORAGE_BPS else "given"),
        "storage_per_device_Bps": failures.storage_per_device_Bps,
        "async_checkpoint": failures.async_checkpoint,
        "host_Bps": host_Bps if failures.async_checkpoint else None,
        "gpu_W": gpu_W, "power_fraction": power.power_fraction, "node_overhead_W": node_W, "nodes": nodes,
        "power_source": "given" if power.gpu_W is not None else (spec.source if spec else None),
    }
    return TimeToTrain(
        amount=amount, unit=unit, steps=steps, step_time_s=step, devices=devices, failure_free_s=work_s,
        wall_s=wall_s, wall_days=wall_s / 86400.0, gpu_hours=gpu_hours, goodput=g,
        expected_interruptions=interruptions, interruptions_per_day=interruptions / (wall_s / 86400.0),
        mtbf_s=mtbf_s, checkpoint_bytes=checkpoint.total_bytes,
        checkpoint_bytes_per_device=checkpoint.per_device_bytes, checkpoint_write_s=write_s,
        checkpoint_pause_s=pause_s, recovery_s=recovery_s, checkpoint_interval_s=interval_s,
        checkpoint_interval_steps=k, young_daly_interval_s=young_daly_interval(pause_s, mtbf_s)
        if pause_s > 0 else 0.0,
        energy_MWh=energy_MWh, average_power_MW=None if watts is None else watts / 1e6,
        cost=None if price_per_gpu_hour is None else gpu_hours * price_per_gpu_hour,
        price_per_gpu_hour=price_per_gpu_hour, assumptions=assumptions, notes=tuple(notes),
    )


# Fields :func:`with_time_to_train` adds to a sweep record.
SWEEP_FIELDS = ("wall_days", "goodput", "expected_interruptions", "interruptions_per_day", "checkpoint_interval_s",
                "wall_gpu_hours", "energy_MWh", "wall_cost")


def with_time_to_train(records, parameters: int, clusters, *, tokens: float | None = None,
                       samples: float | None = None, steps: float | None = None, failures: FailureModel = FailureModel(),
                       power: PowerModel = PowerModel(), price_per_gpu_hour: float | None = None) -> list[dict]:
    """Sweep records (:func:`pase.analysis.sweep.sweep`), each with its time to train, failures included.

    ``parameters``: the graph's parameter count (its checkpoint is that times
    the bytes per parameter of weights and optimizer state, shared evenly by
    the devices); ``clusters``: the swept clusters (their element size, node
    size and GPU figures, found by the record's ``cluster`` name). Adds
    :data:`SWEEP_FIELDS`: ``wall_days``, ``goodput``,
    ``expected_interruptions``, ``interruptions_per_day``,
    ``checkpoint_interval_s``, ``wall_gpu_hours``, ``energy_MWh`` and
    ``wall_cost`` (None without a price, an energy figure or at a 0 s step).
    The records given are not changed.

    Raises
    ------
    ThroughputError
        Not exactly one of ``tokens``, ``samples`` and ``steps``; tokens for
        a record without a sequence, samples for one without a batch; the
        errors of :func:`time_to_train_job`.
    """
    from pase.model.memory import MemoryOptions  # late: pase.model imports widely

    given = [(u, a) for u, a in (("tokens", tokens), ("samples", samples), ("steps", steps)) if a is not None]
    if len(given) != 1:
        raise _Error("give exactly one of tokens, samples or steps to train on")
    (unit, amount), = given
    by_name = {c.name: c for c in clusters}
    out = []
    for r in records:
        cluster = by_name[r["cluster"]]
        empty = dict.fromkeys(SWEEP_FIELDS)
        if not r["step_time_s"] > 0:
            out.append({**r, **empty})
            continue
        if unit == "tokens" and r.get("tokens_per_s") is None:
            raise _Error(f"{r.get('label', 'a record')!r} has no tokens per second (no sequence dimension): "
                         "train on samples or steps instead")
        if unit == "samples" and not r.get("global_batch"):
            raise _Error(f"{r.get('label', 'a record')!r} has no batch: train for steps instead")
        per_step = {"tokens": (r.get("tokens_per_s") or 0) * r["step_time_s"], "samples": r.get("global_batch"),
                    "steps": 1.0}[unit]
        per_param = MemoryOptions().bytes_per_parameter(cluster.bytes_per_element)
        total = float(parameters * (per_param["weights"] + per_param["optimizer"]))
        per_device = total / r["devices"]
        t = time_to_train_job(
            r["step_time_s"], per_step, r["devices"], CheckpointSize(total, per_device, per_device), amount=amount,
            unit=unit, cluster_name=cluster.name,
            devices_per_node=cluster.devices_per_node, failures=failures, power=power,
            price_per_gpu_hour=price_per_gpu_hour)
        out.append({**r, "wall_days": t.wall_days, "goodput": t.goodput,
                    "expected_interruptions": t.expected_interruptions,
                    "interruptions_per_day": t.interruptions_per_day, "checkpoint_interval_s": t.checkpoint_interval_s,
                    "wall_gpu_hours": t.gpu_hours, "energy_MWh": t.energy_MWh, "wall_cost": t.cost})
    return out


def scale_sweep(build, cluster, devices, global_batch: int, *, tokens: float | None = None,
                steps: float | None = None, failures: FailureModel = FailureModel(),
                power: PowerModel = PowerModel(), price_per_gpu_hour: float | None = None, options=None,
                progress=None, framework: str | None = None) -> list[dict]:
    """The 3-D search (:func:`pase.search.stages.search_training`) at each device count, with its time to train.

    ``build(batch)`` builds the model (``pase.models.batch_builder``);
    ``cluster`` is re-sized to each of ``devices``; the global batch stays
    ``global_batch`` (strong scaling, as a pre-training run keeps its batch).
    One record per device count: ``cluster``, ``devices``, ``label``,
    ``step_time_s``, ``tokens_per_s``, ``mfu``, ``memory_per_device_bytes``,
    ``fits_memory``, ``failure_free_days``, ``checkpoint_bytes`` and
    :data:`SWEEP_FIELDS`. Where no configuration fits memory, ``fits_memory``
    is False and the rest None (only plans that fit are priced).
    ``progress(done, total)`` is called after each count. ``framework``
    keeps only what that framework runs (``search_training(framework=)``).

    Raises
    ------
    ThroughputError
        Not exactly one of ``tokens`` and ``steps``, or the errors of :func:`time_to_train_job`.
    ConfigurationError
        As :func:`~pase.search.stages.search_training` (the batch does not split...).
    """
    from pase.ir.configs import ConfigOptions  # late: the search imports the cost model
    from pase.model.memory import InsufficientMemoryError
    from pase.search.stages import search_training

    if (tokens is None) == (steps is None):
        raise _Error("give exactly one of tokens or steps to train on")
    parameters = build(1).parameter_count
    cache: dict = {}
    records = []
    for i, p in enumerate(devices):
        point = cluster.with_devices(int(p))
        try:
            plan = search_training(build, point, global_batch, options=options or ConfigOptions(), cache=cache,
                                   framework=framework).best
        except InsufficientMemoryError:
            records.append({"cluster": point.name, "devices": int(p), "label": "nothing fits memory",
                            "step_time_s": None, "tokens_per_s": None, "mfu": None, "memory_per_device_bytes": None,
                            "fits_memory": False, "failure_free_days": None, "checkpoint_bytes": None,
                            **dict.fromkeys(SWEEP_FIELDS)})
        else:
            t = time_to_train(plan, tokens=tokens, steps=steps, failures=failures, power=power,
                              price_per_gpu_hour=price_per_gpu_hour, parameters=parameters)
            d = plan.to_dict()
            records.append({
                "cluster": point.name, "devices": int(p), "label": plan.label, "step_time_s": plan.step_time_s,
                "tokens_per_s": d["tokens_per_s"], "mfu": plan.mfu,
                "memory_per_device_bytes": plan.memory_per_device_bytes, "fits_memory": plan.fits_memory,
                "failure_free_days": t.failure_free_s / 86400, "checkpoint_bytes": t.checkpoint_bytes,
                "wall_days": t.wall_days, "goodput": t.goodput, "expected_interruptions": t.expected_interruptions,
                "interruptions_per_day": t.interruptions_per_day, "checkpoint_interval_s": t.checkpoint_interval_s,
                "wall_gpu_hours": t.gpu_hours, "energy_MWh": t.energy_MWh, "wall_cost": t.cost})
        if progress is not None:
            progress(i + 1, len(devices))
    return records

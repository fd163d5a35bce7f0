"""The command line's time-to-train options (``--train-tokens``, failures, checkpoints, energy, price), shared by
``pase solve``, ``evaluate`` and ``sweep``: :func:`add_options` adds them to a sub-command, :func:`estimate` prices
a plan with them, :func:`lines` tells the result as text. The model is :mod:`pase.analysis.time_to_train`'s."""

from __future__ import annotations

import argparse
import math

from pase.analysis.time_to_train import (
    DEFAULT_RESTART_S,
    DEFAULT_STORAGE_BPS,
    DEFAULT_STORAGE_PER_DEVICE_BPS,
    LLAMA3_INTERRUPTIONS_PER_GPU_HOUR,
    FailureModel,
    PowerModel,
    TimeToTrain,
    time_to_train,
)
from pase.errors import GraphError

__all__ = ["add_options", "asked", "checked", "estimate", "lines", "models", "print_estimate", "when_asked"]

# What each option sets; with none of them given, nothing is estimated.
_FIELDS = ("train_tokens", "train_steps", "price_per_gpu_hour", "interruptions_per_gpu_hour", "restart_min",
           "storage_gbps", "storage_per_device_gbps", "async_checkpoint", "checkpoint_interval_s", "gpu_power_w",
           "node_overhead_w", "power_fraction")


def _number(what: str, *, zero: bool = False):
    """An argparse type: a finite number > 0 (>= 0 with ``zero``); the message names ``what`` and the fix."""
    def parse(text: str) -> float:
        try:
            value = float(text.replace("_", ""))
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
            bound = ">= 0" if zero else "> 0"
            raise argparse.ArgumentTypeError(f"expected {what}: a number {bound}, got {text[:40]!r}")
        return value
    return parse


def add_options(p: argparse.ArgumentParser) -> None:
    """Add the time-to-train option group to sub-command parser ``p``."""
    g = p.add_argument_group("time, energy and cost to train, with failures and checkpoints "
                             "(see pase.analysis.time_to_train)")
    g.add_argument("--train-tokens", type=_number("tokens to train on, e.g. 15.6e12"),
                   help="estimate the wall-clock days, GPU-hours, goodput, interruptions, energy and cost of "
                        "training on this many tokens")
    g.add_argument("--train-steps", type=_number("steps to train for, e.g. 1e6"),
                   help="the same for a number of steps (instead of --train-tokens)")
    g.add_argument("--price-per-gpu-hour", type=_number("a price per GPU-hour, e.g. 2.5", zero=True),
                   help="price one GPU-hour in any currency for the cost (no default: without it, no cost)")
    g.add_argument("--interruptions-per-gpu-hour", type=_number("failures per GPU-hour, e.g. 2e-5"),
                   help=f"failures per device per hour (default {LLAMA3_INTERRUPTIONS_PER_GPU_HOUR:.3g}: Llama 3's "
                        "419 unexpected interruptions in 54 days on 16,384 H100s)")
    g.add_argument("--restart-min", type=_number("restart minutes, e.g. 10", zero=True),
                   help=f"minutes from a failure to training again, reading the checkpoint aside (default "
                        f"{DEFAULT_RESTART_S / 60:g}: an assumption consistent with Llama 3's >90%% effective "
                        "training time)")
    g.add_argument("--storage-gbps", type=_number("a storage bandwidth in GB/s, e.g. 2000"),
                   help=f"the file system's aggregate write and read rate, GB/s (default "
                        f"{DEFAULT_STORAGE_BPS / 1e9:g}: Llama 3's Tectonic, sustained)")
    g.add_argument("--storage-per-device-gbps", type=_number("a per-device storage bandwidth in GB/s, e.g. 12.5"),
                   help=f"one device's share of its node's storage network, GB/s (default "
                        f"{DEFAULT_STORAGE_PER_DEVICE_BPS / 1e9:g}: a DGX H100's two 400 Gb/s storage ports over "
                        "8 GPUs)")
    g.add_argument("--async-checkpoint", action="store_true",
                   help="asynchronous checkpoints: training stops only to copy to host memory, then writes in the "
                        "background")
    g.add_argument("--checkpoint-interval-s", type=_number("seconds between checkpoints, e.g. 600"),
                   help="checkpoint every this many seconds of work (default: the interval that maximises goodput)")
    g.add_argument("--gpu-power-w", type=_number("a GPU power in watts, e.g. 700"),
                   help="board power per device, W (default: the preset GPU's published TDP)")
    g.add_argument("--node-overhead-w", type=_number("a node overhead in watts, e.g. 4600", zero=True),
                   help="power per node beyond its GPUs, W (default: the DGX system's published maximum less its "
                        "GPUs; 0 for other presets)")
    g.add_argument("--power-fraction", type=_number("a share of board power in (0, 1], e.g. 0.8"),
                   help="average share of board power drawn (default 1: the cap, an upper bound)")


def asked(args) -> bool:
    """Whether ``args`` ask for a time-to-train estimate; ``GraphError`` when they set its figures but give no
    amount to train on, or give both amounts."""
    given = [f for f in _FIELDS if getattr(args, f, None) not in (None, False)]
    if args.train_tokens is not None and args.train_steps is not None:
        raise GraphError("give --train-tokens or --train-steps, not both")
    if given and args.train_tokens is None and args.train_steps is None:
        flag = "--" + given[0].replace("_", "-")
        raise GraphError(f"{flag} prices training: also give --train-tokens N (or --train-steps N)")
    return bool(given)


def checked(args) -> bool:
    """Whether ``args`` ask for a time to train (:func:`asked`), their figures checked at once (before any search,
    so that bad ones fail first); GraphError or ConfigurationError naming a bad figure."""
    if not asked(args):
        return False
    models(args)
    return True


def when_asked(plan, args, parameters: int | None = None) -> TimeToTrain | None:
    """The time to train ``plan`` as ``args`` ask (:func:`estimate`), or None when they do not ask."""
    return estimate(plan, args, parameters) if checked(args) else None


def print_estimate(t: TimeToTrain | None) -> None:
    """Print :func:`lines` of ``t``; nothing for None (not asked)."""
    if t is not None:
        print("\n".join(lines(t)))


def models(args) -> tuple[FailureModel, PowerModel]:
    """The failure and power models ``args`` describe (defaults where an option is left out)."""
    failures = FailureModel(**{k: v for k, v in dict(
        interruptions_per_gpu_hour=args.interruptions_per_gpu_hour,
        restart_s=None if args.restart_min is None else args.restart_min * 60,
        storage_Bps=None if args.storage_gbps is None else args.storage_gbps * 1e9,
        storage_per_device_Bps=None if args.storage_per_device_gbps is None else args.storage_per_device_gbps * 1e9,
        interval_s=args.checkpoint_interval_s,
    ).items() if v is not None}, async_checkpoint=args.async_checkpoint)
    power = PowerModel(gpu_W=args.gpu_power_w, node_overhead_W=args.node_overhead_w,
                       **({} if args.power_fraction is None else {"power_fraction": args.power_fraction}))
    return failures, power


def estimate(plan, args, parameters: int | None = None) -> TimeToTrain:
    """:func:`~pase.analysis.time_to_train.time_to_train` of ``plan`` as ``args`` ask (call :func:`asked` first)."""
    failures, power = models(args)
    if args.train_tokens is not None:
        return time_to_train(plan, tokens=args.train_tokens, failures=failures, power=power,
                             price_per_gpu_hour=args.price_per_gpu_hour, parameters=parameters)
    return time_to_train(plan, steps=args.train_steps, failures=failures, power=power,
                         price_per_gpu_hour=args.price_per_gpu_hour, parameters=parameters)


def lines(t: TimeToTrain) -> list[str]:
    """``t`` as a few lines of text."""
    hours = t.mtbf_s / 3600
    out = [
        f"time to train {t.amount:.4g} {t.unit}: {t.wall_days:.1f} days ({t.failure_free_s / 86400:.1f} without "
        f"failures), goodput {t.goodput:.3f}, {t.gpu_hours:,.0f} GPU-hours",
        f"  failures: {t.expected_interruptions:,.0f} interruptions expected ({t.interruptions_per_day:.2f} a day, "
        f"one every {hours:.3g} h on {t.devices:,} devices), {t.recovery_s / 60:.1f} min to recover from each",
        f"  checkpoints: {t.checkpoint_bytes / 1e12:.3g} TB ({t.checkpoint_bytes_per_device / 1e9:.3g} GB written "
        f"per device) every {t.checkpoint_interval_steps:,} steps ({t.checkpoint_interval_s:,.0f} s; Young-Daly "
        f"{t.young_daly_interval_s:,.0f} s), training stops {t.checkpoint_pause_s:.3g} s for each "
        f"({'asynchronous' if t.assumptions['async_checkpoint'] else 'synchronous'}, written in "
        f"{t.checkpoint_write_s:.3g} s)",
        "  energy: " + ("unknown (no board power)" if t.energy_MWh is None else
                        f"{t.energy_MWh:,.0f} MWh at {t.average_power_MW:.3g} MW (board power x "
                        f"{t.assumptions['power_fraction']:g} + node overhead; no PUE)")
        + "; cost: " + ("no price given (pase has no default)" if t.cost is None else
                        f"{t.cost:,.0f} at {t.price_per_gpu_hour:g} per GPU-hour"),
    ]
    out += [f"  note: {n}" for n in t.notes if not n.startswith("no price")]
    return out

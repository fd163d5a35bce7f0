"""The memory reserve per GPU (pase.model.memory.Reserve): its parts and their sources, where it applies, that
every plan's memory counts it (so "fits" means fits with it), and the CLI's --reserve-gb and margin."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from pase.cli import main
from pase.errors import ClusterError, ConfigurationError
from pase.hardware.cluster import Cluster, preset
from pase.model.memory import DEFAULT_RESERVE, RESERVE_SOURCES, MemoryOptions, Reserve
from pase.model.training import Parallelism, evaluate_training
from pase.models import batch_builder, sample
from pase.planner import evaluate

BUILD = batch_builder("gpt", layers=2, d_model=64, heads=4, seq=32, vocab=256)


def test_every_part_of_the_default_has_its_source_and_they_sum_to_the_total():
    parts = DEFAULT_RESERVE.parts()
    assert list(parts) == list(RESERVE_SOURCES)
    assert sum(parts.values()) == pytest.approx(DEFAULT_RESERVE.total_bytes)
    assert all(value > 0 for value in parts.values())
    # Each source states the figure it gives, in the part's own unit (GiB or MiB), so the text and the value agree.
    for name, value in parts.items():
        figure = re.match(r"([\d.]+) (GiB|MiB)", RESERVE_SOURCES[name])
        assert figure, RESERVE_SOURCES[name]
        assert float(figure[1]) * (1 << 30 if figure[2] == "GiB" else 1 << 20) == pytest.approx(value), name
    # NCCL's part is NCCL_BUFFSIZE's documented 4 MiB per channel per peer, times channels, peers, communicators.
    assert DEFAULT_RESERVE.nccl_bytes == 4 * 32 * 2 * 4 * (1 << 20)


def test_a_reserve_is_never_negative():
    with pytest.raises(ConfigurationError, match="nccl_bytes"):
        Reserve(nccl_bytes=-1.0)
    with pytest.raises(ConfigurationError, match="reserved_bytes"):
        MemoryOptions(reserved_bytes=float("nan"))
    with pytest.raises(ClusterError, match="reserved_bytes"):
        Cluster(8, 10e12, 16e9, reserved_bytes=-1.0)


def test_the_reserve_applies_where_the_memory_is_known_unless_set():
    assert MemoryOptions().reserve_on(preset("dgx-h100")) == DEFAULT_RESERVE.total_bytes
    assert MemoryOptions().reserve_on(preset("paper-model")) == 0.0  # no capacity: nothing to fit
    assert MemoryOptions().reserve_on(replace(preset("dgx-h100"), reserved_bytes=1e9)) == 1e9
    assert MemoryOptions(reserved_bytes=2e9).reserve_on(replace(preset("dgx-h100"), reserved_bytes=1e9)) == 2e9


def test_every_plan_counts_the_reserve_and_fits_with_it():
    cluster = preset("dgx-h100", 8)
    par = Parallelism(tensor=2, data=4, global_batch=8)
    with_reserve = evaluate_training(BUILD, cluster, par)
    without = evaluate_training(BUILD, replace(cluster, reserved_bytes=0.0), par)
    assert with_reserve.memory_per_device_bytes - without.memory_per_device_bytes == pytest.approx(
        DEFAULT_RESERVE.total_bytes)
    # A capacity the plan fits only without the reserve: it does not fit.
    tight = without.memory_per_device_bytes + DEFAULT_RESERVE.total_bytes / 2
    assert evaluate_training(BUILD, replace(cluster, memory_bytes=tight, reserved_bytes=0.0), par).fits_memory
    assert evaluate_training(BUILD, replace(cluster, memory_bytes=tight), par).fits_memory is False
    # The per-layer model too.
    graph = sample("alexnet", batch=8)
    strategy = {layer.name: (1,) * len(layer.dims) for layer in graph}
    one = preset("dgx-h100", 1)
    assert evaluate(graph, one, strategy).memory_per_device_bytes - evaluate(
        graph, replace(one, reserved_bytes=0.0), strategy).memory_per_device_bytes == pytest.approx(
        DEFAULT_RESERVE.total_bytes)


def test_the_cli_sets_the_reserve_and_shows_the_margin(capsys):
    args = ["evaluate", "megatron-1.7b", "--cluster", "dgx-a100", "--devices", "8", "--tp", "2", "--pp", "2",
            "--global-batch", "16"]
    assert main(args) == 0
    default = capsys.readouterr().out
    assert main([*args, "--reserve-gb", "10"]) == 0
    ten = capsys.readouterr().out
    capacity = 81_920 * 2**20 / 1e9  # an A100 80 GB's NVML total, 85.90 GB
    line = re.compile(rf"memory per device ([\d.]+) GB of {capacity:.2f} GB \(reserve ([\d.]+) GB included.*\): "
                      r"fits, ([\d.]+) GB to spare")
    (need, reserve, spare), (need10, reserve10, spare10) = (
        tuple(map(float, line.search(text).groups())) for text in (default, ten))
    assert reserve == pytest.approx(DEFAULT_RESERVE.total_bytes / 1e9, abs=0.01) and reserve10 == 10.0
    assert need10 - need == pytest.approx(10 - reserve, abs=0.02)
    assert spare == pytest.approx(capacity - need, abs=0.02)
    assert spare10 == pytest.approx(capacity - need10, abs=0.02)
    assert "custom" not in ten  # the reserve is no hardware figure: the preset keeps its figures and name
    assert main([*args, "--reserve-gb", "-1"]) == 2
    assert "reserve per device" in capsys.readouterr().err

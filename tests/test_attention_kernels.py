"""Fused attention by head shape (pase.hardware.attention_kernels) against NVIDIA's published cuDNN timings."""

import json
from dataclasses import replace

import numpy as np
import pytest

from pase.errors import ClusterError
from pase.hardware.attention_kernels import SHAPE_TABLES, measured_shapes, published_rates, shape_factor
from pase.hardware.cluster import CALIBRATIONS, H200_MEASURED
from pase.hardware.efficiency import Efficiency
from pase.model.attention import attention_units, flash_flops, flash_times_s, head_widths
from pase.models import sample
from pase.models.llama import llama

ROWS = json.loads(SHAPE_TABLES["hopper"].read_text())["rows"]
# The H200 fit at the 1,980 MHz its kernels were timed at, with Hopper's head shapes.
H200 = replace(H200_MEASURED.efficiency, attention_shapes=published_rates("hopper"))
HOPPER, BLACKWELL = published_rates("hopper"), published_rates("blackwell")


def _graph(row):
    if row["model"] == "dsv3":  # DeepSeek-V3's own attention: 128 heads, 192-wide q and k, 128-wide v
        return sample("deepseek-v3", batch=row["b"], seq=row["s"])
    return llama("a", layers=1, hidden=row["hq"] * row["d_qk"], heads=row["hq"], kv_heads=row["hkv"], ffn=64,
                 vocab=64, batch=row["b"], seq=row["s"], head_dim=row["d_qk"], window=row["window"])


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['model']}-s{r['s']}")
def test_each_published_kernel_is_priced_near_its_time(row):
    # The kernel of a block of that shape, on the fit of the H200's own timings (torch's flash backend, 128-wide
    # heads, at the 1,980 MHz it was timed at): the 128-wide rows are out of sample (another library's kernels,
    # 2-14% faster than the fit at long sequences), the other shapes take their rate over those rows from the
    # same run, so they land as near as the 128-wide rows do.
    g = _graph(row)
    unit = attention_units(g)[0]
    assert head_widths(g, unit) == (row["d_qk"], row["d_v"])
    cfg = np.ones((1, len(g.layer(unit.scores).dims)))
    forward, backward = flash_times_s(g, unit, cfg, 989e12, H200, 2)
    assert forward[0] + backward[0] == pytest.approx((row["fwd_ms"] + row["bwd_ms"]) / 1e3, rel=0.15)


def test_deepseek_v3s_kernel_counts_its_value_heads_at_their_width():
    # Hand count: the score product 2 b s^2 h 192 and the context product 2 b s^2 h 128, each over the causal
    # half (plus the diagonal) of the square.
    b, s, h = 1, 256, 128
    g = sample("deepseek-v3", batch=b, seq=s)
    unit = attention_units(g)[0]
    forward, backward = flash_flops(g, unit, np.ones((1, len(g.layer(unit.scores).dims))))
    causal = (s + 1) / (2 * s)
    assert forward[0] == pytest.approx(2 * b * s * s * h * (192 + 128) * causal)
    assert backward[0] == pytest.approx(2.5 * forward[0])


def test_the_reference_width_unmeasured_shapes_and_other_gpus_keep_the_calibrations_curve():
    flops = np.array([1e9, 1e11, 1e13])
    assert set(measured_shapes(HOPPER)) == set(measured_shapes(BLACKWELL)) == {(192, 128, False), (64, 64, True)}
    # Unmeasured: 128-wide heads under a window, other widths, 64-wide heads without a window, no rates at all.
    for rates, shape in [(HOPPER, (128, 128, True)), (HOPPER, (96, 96, False)), (HOPPER, (256, 256, False)),
                         (HOPPER, (64, 64, False)), (BLACKWELL, (64, 64, False)), (None, (64, 64, True))]:
        assert np.array_equal(shape_factor(rates, *shape, flops), np.ones(3))
        assert np.array_equal(shape_factor(rates, *shape, flops, backward=True), np.ones(3))
    rates = {name: e.attention_shapes for name, e in CALIBRATIONS.items()}
    assert rates["dgx-h100"] == rates["dgx-h200"] == HOPPER and rates["dgx-b200"] == BLACKWELL
    assert rates["dgx-a100"] is None


def test_narrow_windowed_and_latent_heads_run_slower_than_128_wide_ones():
    # The published H200 run's shapes at every size it measured: 64-wide heads under a window at 55-75% of the
    # 128-wide rate both ways; MLA's forward within 10% of it, its backward about a quarter slower.
    flops = np.geomspace(1e10, 1e14, 9)
    for back in (False, True):
        narrow = shape_factor(HOPPER, 64, 64, True, flops, backward=back)
        assert np.all((narrow > 0.5) & (narrow < 0.75))
    assert np.all(np.abs(shape_factor(HOPPER, 192, 128, False, flops) - 1) < 0.1)
    latent = shape_factor(HOPPER, 192, 128, False, flops, backward=True)
    assert np.all((latent > 0.7) & (latent < 0.8))


@pytest.mark.parametrize("bad", ["hopper", 3, [[192, 128, False, []]], [[192, 128, False, [[1e9, 0.5]]]],
                                 [[192.5, 128, False, [[1e9, 1, 1]]]], [[192, 128, 0, [[1e9, 1, 1]]]],
                                 [[192, 128, False, [[1e9, 0.9, -1]]]], [[192, 128, [[1e9, 0.9, 0.8]]]],
                                 [[192, 128, False, [[1e9, 0.9, 0.8], [1e8, 0.9, 0.8]]]],
                                 [[192, 128, False, [[1e9, 9, 0.8]]]]])
def test_head_shape_rates_that_are_not_widths_and_ascending_factors_are_refused(bad):
    data = {**CALIBRATIONS["dgx-h100"].to_dict(), "attention_shapes": bad}
    with pytest.raises(ClusterError, match="attention_shapes needs, per head shape"):
        Efficiency.from_dict(data)


def test_a_calibration_file_keeps_its_head_shape_rates():
    e = CALIBRATIONS["dgx-h100"]
    assert Efficiency.from_dict(json.loads(json.dumps(e.to_dict()))).attention_shapes == HOPPER


def test_the_calibrations_figures_name_the_head_shapes_source():
    from ui.stepmodel import sources_list

    listed = sources_list(CALIBRATIONS["dgx-h100"])
    assert "attention\\_shapes** = 64\\/64\\-wide heads under a sliding window" in listed and "cudnn" in listed

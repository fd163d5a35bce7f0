"""The SMs DeepEP's kernels hold while they overlap the computation (pase.model.experts.overlapped_s, DEEPEP_SMS), and
the device's SM count in a calibration (Efficiency.sms).

References: a small event simulation of a GPU's SMs working through the computation's thread blocks while a
communication kernel holds some of them; DeepSeek's published training profile (the SMs its products were
launched on, tests/data/deepseek-v3-h800-profile.json); the published SM counts.
"""

import heapq
import json
from dataclasses import replace
from pathlib import Path

import pytest

from pase.errors import ClusterError
from pase.hardware.calibration import Calibration, load_calibration
from pase.hardware.cluster import preset
from pase.hardware.efficiency import Efficiency
from pase.model.experts import DEEPEP_SMS, block_costs, comm_sm_share, expert_layout, moe_blocks, overlapped_s
from pase.model.training import Parallelism
from pase.models import sample

PROFILE = json.loads((Path(__file__).parent / "data" / "deepseek-v3-h800-profile.json").read_text())


def simulate(sms: int, held: int, comm_s: float, blocks: int, block_s: float) -> float:
    """When the last of ``blocks`` thread blocks of ``block_s`` seconds each ends on a GPU of ``sms`` SMs, one block
    an SM at a time, while a communication kernel holds ``held`` of the SMs for its first ``comm_s`` seconds; the
    pair ends when both have (events: an SM freed by a block, the communication's end freeing its SMs)."""
    free = [(0.0, i) for i in range(sms - held)] + [(comm_s, i) for i in range(sms - held, sms)]
    heapq.heapify(free)
    end = 0.0
    for _ in range(blocks):
        start, sm = heapq.heappop(free)
        end = max(end, start + block_s)
        heapq.heappush(free, (start + block_s, sm))
    return max(end, comm_s)


@pytest.mark.parametrize("comm_s, compute_s", [(1.0, 3.0), (1.0, 1.0), (2.0, 1.0), (1.0, 0.8), (0.3, 5.0)])
def test_overlapped_time_matches_an_event_simulation_of_the_sms(comm_s, compute_s):
    sms, held = 132, DEEPEP_SMS
    block_s = 1e-3  # many small blocks, as a large product's tiles
    blocks = round(compute_s * sms / block_s)  # compute_s of work on the whole GPU
    simulated = simulate(sms, held, comm_s, blocks, block_s)
    assert overlapped_s(compute_s, comm_s, held / sms) == pytest.approx(simulated, abs=2 * block_s)


def test_nothing_held_is_the_plain_overlap():
    assert overlapped_s(3.0, 1.0, 0.0) == 3.0 and overlapped_s(1.0, 3.0, 0.0) == 3.0


def test_deepeps_sms_are_those_deepseeks_published_profile_left_its_products():
    # DeepSeek's H800 trace launched every matrix product on 112 thread blocks, one an SM: 132 less DeepEP's 20.
    assert PROFILE["gpu"] == "NVIDIA H800" and PROFILE["sms"] == 132
    assert PROFILE["product_grid_ctas"] == [PROFILE["sms"] - DEEPEP_SMS]


def test_the_presets_hold_the_published_sm_counts():
    assert {n: preset(n).efficiency.sms for n in ("dgx-a100", "dgx-h100", "dgx-h200", "dgx-b200")} == {
        "dgx-a100": 108, "dgx-h100": 132, "dgx-h200": 132, "dgx-b200": 148}
    assert "published" in preset("dgx-b200").efficiency.sources["sms"]


def _dsv3(dispatcher: str, overlap: bool, cluster):
    par = Parallelism(tensor=1, pipeline=1, data=64, microbatch_size=1, global_batch=64, ep=64, etp=1,
                      dispatcher=dispatcher, expert_overlap=overlap)
    block = moe_blocks(sample("deepseek-v3", batch=1, seq=4096))[0]
    return block_costs(block, par, cluster, expert_layout(par, cluster.mesh), "fp8")


def test_deepep_overlap_slows_the_computation_it_hides_behind_by_its_share_of_the_sms():
    # On one node's worth of NVLink speed the exchange is short beside the experts' products: the computation runs
    # the whole exchange on 112 of 132 SMs.
    fast = replace(preset("dgx-h100", 64, calibrated=True), inter_bandwidth_Bps=450e9)
    plain, overlapped = _dsv3("deepep", False, fast), _dsv3("deepep", True, fast)
    comm = plain["dispatch_s"] / 2  # forward and backward exchange the same bytes
    compute_f = plain["forward_s"] - comm
    assert compute_f > comm
    assert overlapped["forward_s"] == pytest.approx(compute_f + DEEPEP_SMS / 132 * comm)
    # NCCL's all-to-all is priced without an SM share (not modelled): the plain overlap.
    a2a, a2a_over = _dsv3("alltoall", False, fast), _dsv3("alltoall", True, fast)
    assert a2a_over["forward_s"] == pytest.approx(max(a2a["forward_s"] - a2a["dispatch_s"] / 2, a2a["dispatch_s"] / 2))
    assert comm_sm_share("alltoall", fast) == 0.0


def test_an_unknown_sm_count_holds_nothing():
    cluster = preset("dgx-h100", 64, calibrated=True)
    bare = replace(cluster, efficiency=replace(cluster.efficiency, sms=None))
    assert comm_sm_share("deepep", cluster) == pytest.approx(20 / 132)
    assert comm_sm_share("deepep", bare) == 0.0


@pytest.mark.parametrize("bad", [0, -3, 2.5, 10**6, True, "132", float("nan")])
def test_an_implausible_sm_count_is_refused_naming_it(bad):
    with pytest.raises(ClusterError, match="sms"):
        Efficiency(matmul_curve=((1e9, 0.5),), vector_flops=1e12, memory_Bps=1e12, sms=bad)


def test_the_sm_count_survives_a_calibration_file_and_a_file_without_it_keeps_the_presets(tmp_path):
    eff = preset("dgx-h100").efficiency
    assert Efficiency.from_dict(eff.to_dict()).sms == 132
    without = {k: v for k, v in eff.to_dict().items() if k != "sms"}
    assert Efficiency.from_dict(without).sms is None
    h200 = load_calibration(Path(__file__).parents[1] / "pase" / "hardware" / "data" / "dgx-h200.json")
    assert h200.efficiency.sms is None  # fitted from a kernel file that did not record it
    assert isinstance(h200, Calibration)
    assert preset("dgx-h100", 8, calibration=h200).efficiency.sms == 132


def test_pase_calibrate_records_the_sm_count_it_measured():
    from pase.calibrate.fit import fit_efficiency

    rows = json.loads((Path(__file__).parents[1] / "pase" / "hardware" / "data" / "h200-kernels.json").read_text())
    fitted = fit_efficiency({**rows, "sms": 132}, 989e12, 1979e12, source="a run").efficiency
    assert fitted.sms == 132 and fitted.sources["sms"].startswith("measured")
    assert fit_efficiency(rows, 989e12, 1979e12, source="a run").efficiency.sms is None

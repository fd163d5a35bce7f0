"""Megatron-Core's 1F1B all-to-all overlap (pase.model.expert_overlap): its merged schedule, the SMs DeepEP's kernels
hold meanwhile, and the device's SM count in a calibration (Efficiency.sms).

References: a hand-worked timeline of the schedule; a small event simulation of a GPU's SMs working through the
computation's thread blocks while a communication kernel holds some of them; DeepSeek's published training profile
(the SMs its products were launched on, tests/data/deepseek-v3-h800-profile.json); the published SM counts.
"""

import heapq
import json
import random
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from pase.errors import ClusterError
from pase.hardware.calibration import Calibration, load_calibration
from pase.hardware.cluster import Cluster, preset
from pase.hardware.efficiency import Efficiency
from pase.ir.configs import ConfigOptions
from pase.model.expert_overlap import DEEPEP_SMS, LayerParts, comm_sm_share, merged_layer_s, unmerged_share
from pase.model.memory import MemoryOptions
from pase.model.training import Parallelism, cached_times, evaluate_training
from pase.models import sample
from pase.models.moe import moe_decoder

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
def test_computation_beside_deepep_matches_an_event_simulation_of_the_sms(comm_s, compute_s):
    # One exchange (the combine's backward) beside one part of the computation (the attention's forward).
    sms, held = 132, DEEPEP_SMS
    block_s = 1e-3  # many small blocks, as a large product's tiles
    blocks = round(compute_s * sms / block_s)  # compute_s of work on the whole GPU
    parts = LayerParts(compute_s, 0, 0, 0, 0, 0, 0, 0, comm_s)
    assert merged_layer_s(parts, held / sms) == pytest.approx(simulate(sms, held, comm_s, blocks, block_s),
                                                              abs=2 * block_s)


def test_the_merged_schedule_by_hand():
    # attention forward 1, MLP forward 2, MLP backward 2, its weight gradients 1, attention backward 2; every
    # exchange 1. By hand: the combine's backward beside the attention's forward (0-1); the MLP's backward (1-3)
    # beside the dispatch's forward (1-2); the dispatch's backward waits for it (3-4), beside the weight gradients
    # (3-4); the MLP's forward (4-6); the combine's forward waits for it (6-7), beside the attention's backward (6-8).
    parts = LayerParts(1, 2, 2, 1, 2, 1, 1, 1, 1)
    assert merged_layer_s(parts) == pytest.approx(8.0)
    # With DeepEP's 15% of the SMs held: each part beside an exchange runs 0.85 as fast while it lasts (1.15, 3.3,
    # 4.45, 6.45, then the attention's backward 8.6).
    assert merged_layer_s(parts, 0.15) == pytest.approx(8.6)


def test_the_merged_schedule_lies_between_full_overlap_and_none():
    rng = random.Random(7)
    for _ in range(200):
        parts = LayerParts(*(rng.choice([0.0, rng.uniform(0, 3)]) for _ in range(9)))
        computation, exchanges = sum(parts[:5]), sum(parts[5:])
        t = merged_layer_s(parts)
        assert max(computation, exchanges) - 1e-9 <= t <= computation + exchanges + 1e-9
        assert merged_layer_s(parts, 0.2) >= t - 1e-9
        longer = parts._replace(mlp_forward=parts.mlp_forward + 0.5)
        assert merged_layer_s(longer) >= t - 1e-9


def test_nothing_to_overlap_is_the_sum_of_either_stream():
    assert merged_layer_s(LayerParts(1, 2, 3, 4, 5, 0, 0, 0, 0)) == pytest.approx(15)
    assert merged_layer_s(LayerParts(0, 0, 0, 0, 0, 1, 2, 3, 4), 0.5) == pytest.approx(10)
    with pytest.raises(ValueError):
        merged_layer_s(LayerParts(1, 2, 3, 4, 5, 0, 0, 0, -1))


def test_deepeps_sms_are_those_deepseeks_published_profile_left_its_products():
    # DeepSeek's H800 trace launched every matrix product on 112 thread blocks, one an SM: 132 less DeepEP's 20.
    assert PROFILE["gpu"] == "NVIDIA H800" and PROFILE["sms"] == 132
    assert PROFILE["product_grid_ctas"] == [PROFILE["sms"] - DEEPEP_SMS]


def test_the_presets_hold_the_published_sm_counts():
    assert {n: preset(n).efficiency.sms for n in ("dgx-a100", "dgx-h100", "dgx-h200", "dgx-b200")} == {
        "dgx-a100": 108, "dgx-h100": 132, "dgx-h200": 132, "dgx-b200": 148}
    assert "published" in preset("dgx-b200").efficiency.sources["sms"]


@pytest.mark.parametrize("dispatcher", ["deepep", "alltoall"])
def test_a_deepseek_v3_layer_with_the_overlap_hides_its_exchanges_behind_the_other_microbatch(dispatcher):
    cluster = preset("dgx-h100", 64, calibrated=True)
    build = lambda b: sample("deepseek-v3", batch=b, seq=4096)
    times = {}
    for overlap in (False, True):
        par = Parallelism(tensor=1, pipeline=1, data=64, microbatch_size=1, global_batch=64, ep=64, etp=1,
                          dispatcher=dispatcher, expert_overlap=overlap)
        times[overlap] = cached_times(build, cluster, par, ConfigOptions(attention="flash", precision="fp8"),
                                      MemoryOptions(), {})["none"]
    plain, merged = times[False], times[True]
    i = next(k for k, l in enumerate(plain.graph.layers) if l.name == "layers.10.moe.experts")
    layer = [k for k, l in enumerate(plain.graph.layers) if l.name.startswith("layers.10.")]
    total = lambda lt: float(sum(lt.forward_s[k] + lt.backward_s[k] + lt.recompute_s[k] for k in layer))
    computation = total(plain) - float(plain.dispatch_s[i])
    # Hidden behind the whole layer of another microbatch, the exchanges cost less than exposed, but the layer never
    # takes less than its computation or its exchanges alone.
    assert max(computation, float(plain.dispatch_s[i])) <= total(merged) < total(plain)
    exposed = merged.experts["dispatch_exposed_s_per_block"]
    assert total(merged) == pytest.approx(computation + exposed)
    # Only the experts layer changes.
    assert all(merged.forward_s[k] == plain.forward_s[k] for k in layer if k != i)


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


class _Group:
    def __init__(self, size, rank):
        self._size, self._rank = size, rank

    def size(self):
        return self._size

    def rank(self):
        return self._rank


@pytest.mark.parametrize("stages, virtual, microbatches", [(8, 4, 128), (4, 2, 8), (2, 3, 3), (8, 4, 4), (2, 2, 1)])
def test_the_unmerged_passes_are_megatron_cores_own_warm_up(stages, virtual, microbatches):
    schedules = pytest.importorskip("megatron.core.pipeline_parallel.schedules")
    share = unmerged_share(stages, virtual, microbatches)
    for rank in range(stages):
        comm = SimpleNamespace(pp_group=_Group(stages, rank), virtual_pipeline_model_parallel_size=virtual)
        total, _, warmup, _ = schedules.get_pp_rank_microbatches(
            microbatches, virtual, stages, overlap_moe_expert_parallel_comm=True, p2p_communicator=comm)
        assert share[rank] == pytest.approx(warmup / total)
    # Without pipelining only the first forward and the last backward run alone.
    assert unmerged_share(1, 1, 8).tolist() == [1 / 8]


def _tiny_moe_plan(microbatches: int, overlap: bool):
    build = lambda b: moe_decoder("tiny-moe", layers=4, hidden=64, heads=4, kv_heads=2, experts=8, top_k=2,
                                  expert_ffn=128, vocab=256, batch=b, seq=32)
    cluster = Cluster(8, 100e12, 100e9, 2, 80e9, "test", 4, 10e9)
    par = Parallelism(tensor=1, pipeline=2, data=4, microbatch_size=1, global_batch=4 * microbatches, ep=4, etp=1,
                      expert_overlap=overlap)
    return evaluate_training(build, cluster, par)


def test_a_pipeline_all_in_warm_up_exposes_every_exchange():
    # Two stages and one microbatch: every pass is a warm-up forward or a cool-down backward, unmerged, so each
    # stage's forward plus backward is that of the plan without the overlap.
    for m, same in ((1, True), (32, False)):
        merged, plain = _tiny_moe_plan(m, True), _tiny_moe_plan(m, False)
        pairs = [(a.forward_s + a.backward_s, b.forward_s + b.backward_s) for a, b in zip(merged.stages, plain.stages)]
        if same:
            assert all(x == pytest.approx(y) for x, y in pairs)
        else:  # most passes merged: the overlap hides some of the exchanges on every stage
            assert all(x < y for x, y in pairs)


def test_the_shared_experts_beside_the_all_to_all_hide_no_more_than_either():
    # DeepSeek-V3's shared expert (gate, up, SwiGLU, down) beside each block's dispatch and combine on B200s, EP 8.
    cluster = preset("dgx-b200", 64, calibrated=True)
    build = lambda b: sample("deepseek-v3", batch=b, seq=4096)
    times = {}
    for shared in (False, True):
        par = Parallelism(tensor=1, pipeline=1, data=64, microbatch_size=1, global_batch=64, ep=8, etp=1,
                          capacity_factor=1.0, shared_expert_overlap=shared)
        times[shared] = cached_times(build, cluster, par, ConfigOptions(attention="flash", precision="fp8"),
                                     MemoryOptions(), {})["none"]
    plain, beside = times[False], times[True]
    names = [l.name for l in plain.graph.layers]
    i = names.index("layers.10.moe.experts")
    shared = [k for k, n in enumerate(names) if n.startswith("layers.10.shared.")]
    assert len(shared) == 4
    exchanges = float(plain.dispatch_s[i])
    for direction in ("forward_s", "backward_s"):
        hidden = float(getattr(plain, direction)[i] - getattr(beside, direction)[i])
        shared_s = float(sum(getattr(plain, direction)[k] for k in shared))
        assert 0 < hidden <= min(shared_s, exchanges) + 1e-12
        # Every layer but the experts layers is priced as before.
        assert all(getattr(plain, direction)[k] == getattr(beside, direction)[k] for k, l in
                   enumerate(plain.graph.layers) if l.op != "MoEExperts")
    assert beside.experts["dispatch_exposed_s_per_block"] < plain.experts["dispatch_exposed_s_per_block"] == exchanges


def test_the_search_plans_the_shared_experts_beside_the_all_to_all_where_megatron_core_runs_it():
    from pase.search.stages import search_training

    build = lambda b: moe_decoder("tiny-moe", layers=4, hidden=64, heads=4, kv_heads=2, experts=8, top_k=2,
                                  expert_ffn=128, shared_ffn=256, vocab=256, batch=b, seq=32)
    cluster = Cluster(8, 100e12, 100e9, 2, 80e9, "test", 4, 10e9)
    plain = search_training(build, cluster, 16, dispatchers=("alltoall",))
    beside = search_training(build, cluster, 16, dispatchers=("alltoall",), shared_expert_overlap=True)
    assert beside.best.parallelism.shared_expert_overlap  # all-to-all, no 1F1B overlap: every plan runs it
    assert beside.best.step_time_s <= plain.best.step_time_s
    # With the 1F1B overlap asked for too, plans with expert parallelism take that one and not the shared experts'.
    both = search_training(build, cluster, 16, dispatchers=("alltoall",), expert_overlap=True,
                           shared_expert_overlap=True)
    par = both.best.parallelism
    assert not (par.expert_overlap and par.shared_expert_overlap)
    assert par.shared_expert_overlap == (par.ep == 1)

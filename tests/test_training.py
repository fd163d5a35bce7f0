"""3-D parallel training: configurations, memory under ZeRO, step times by hand, the joint search by brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pase.errors import ConfigurationError
from pase.hardware.cluster import Cluster
from pase.hardware.mesh import MeshAxis
from pase.model.pipeline import simulate
from pase.model.training import Parallelism, attention_core, blocks, evaluate_training, group_extents
from pase.models import batch_builder, sample
from pase.search.stages import search_training

SMALL = dict(layers=4, d_model=64, heads=4, seq=32, vocab=256)
BUILD = batch_builder("gpt", **SMALL)


def _cluster(devices=8, per_node=4, memory=None):
    # Toy capacities (0.12 GB...) test the search; the reserve of a real GPU (pase.model.memory.DEFAULT_RESERVE,
    # about 4 GB) would leave them nothing, so it is 0 here.
    return Cluster(devices, 100e12, 100e9, 2, memory, "test", per_node, 10e9, reserved_bytes=0.0)


def test_parameters_and_states_follow_zero_formulas():
    # Rajbhandari et al.: 16, 4 + 12/d, 2 + 14/d, 16/d bytes per parameter with mixed-precision Adam.
    d = 4
    expected = {0: 16, 1: 4 + 12 / d, 2: 2 + 14 / d, 3: 16 / d}
    params = sample("gpt", batch=1, **SMALL).parameter_count
    for z, per_param in expected.items():
        par = Parallelism(data=d, pipeline=2, global_batch=8, zero=z)
        got = evaluate_training(BUILD, _cluster(), par)
        states = sum(s.weights_bytes + s.gradient_bytes + s.optimizer_bytes for s in got.stages)
        assert states == pytest.approx(params * per_param)


def test_one_device_step_is_the_sum_of_its_layers():
    # No parallelism, m microbatches in a row: m (f + b), no bubble, nothing to reduce.
    par = Parallelism(global_batch=4, microbatch_size=1)
    got = evaluate_training(BUILD, _cluster(1, 1), par)
    (stage,) = got.stages
    assert got.step_time_s == pytest.approx(4 * (stage.forward_s + stage.backward_s))
    assert got.schedule.bubble_fraction == pytest.approx(0.0)
    # All compute: the step is the model's FLOPs at peak, so MFU is 1.
    assert got.mfu == pytest.approx(1.0)


def test_data_parallel_reduction_is_a_ring_all_reduce_across_nodes():
    # 2 nodes x 1 device: 2 (d - 1)/d x gradient bytes over the 10 GB/s network, once a step.
    cluster = _cluster(2, 1)
    par = Parallelism(data=2, global_batch=4, microbatch_size=1)
    got = evaluate_training(BUILD, cluster, par)
    grad_bytes = sample("gpt", batch=1, **SMALL).parameter_count * 2
    assert got.stages[0].reduce_s == pytest.approx(2 * (1 / 2) * grad_bytes / 10e9)
    alone = evaluate_training(BUILD, _cluster(1, 1), Parallelism(global_batch=2, microbatch_size=1))
    assert got.step_time_s == pytest.approx(alone.step_time_s + got.stages[0].reduce_s)


def test_pipeline_step_matches_the_schedule_of_its_stage_times():
    par = Parallelism(pipeline=4, data=2, global_batch=16, microbatch_size=1)
    got = evaluate_training(BUILD, _cluster(), par)
    assert [s.layer_count for s in got.stages] and sum(s.layer_count for s in got.stages) == len(BUILD(1))
    again = simulate("1f1b", [s.forward_s for s in got.stages], [s.backward_s for s in got.stages], 8,
                     send_s=[s.send_s for s in got.stages[:-1]], reduce_s=[s.reduce_s for s in got.stages])
    assert got.step_time_s == pytest.approx(again.step_time_s)
    # 1F1B keeps S - s microbatches on stage s.
    assert [s.in_flight for s in got.stages] == [4, 3, 2, 1]


def test_the_search_bound_never_exceeds_the_simulated_step():
    from pase.model.training import _step_lower_bound

    rng = np.random.default_rng(5)
    for _ in range(200):
        S, v = int(rng.integers(1, 6)), int(rng.choice([1, 1, 2, 3]))
        m = S * int(rng.integers(1, 4))
        f, b = rng.uniform(0.1, 2, S * v), rng.uniform(0.1, 4, S * v)
        send, reduce = rng.uniform(0, 0.5, S * v - 1), rng.uniform(0, 3, S)
        overlap = bool(rng.integers(2))
        for schedule in (["interleaved"] if v > 1 else ["1f1b", "gpipe"]):
            step = simulate(schedule, f, b, m, chunks=v, send_s=send, reduce_s=reduce, overlap=overlap).step_time_s
            assert _step_lower_bound(list(f), list(b), list(send), S, m, list(reduce), overlap) <= step * (1 + 1e-12)


def test_recomputation_trades_memory_for_time():
    base = dict(tensor=2, pipeline=2, data=2, global_batch=8, microbatch_size=2)
    plain, selective, full = (evaluate_training(BUILD, _cluster(), Parallelism(**base, recompute=r))
                              for r in ("none", "selective", "full"))
    assert full.stages[0].activation_bytes < selective.stages[0].activation_bytes < plain.stages[0].activation_bytes
    assert plain.step_time_s < selective.step_time_s < full.step_time_s
    assert plain.hfu == pytest.approx(plain.mfu) and full.hfu > full.mfu


def test_sequence_parallelism_shards_the_norm_activations():
    base = dict(tensor=4, data=2, global_batch=8, microbatch_size=1)
    off = evaluate_training(BUILD, _cluster(), Parallelism(**base))
    on = evaluate_training(BUILD, _cluster(), Parallelism(**base, sequence_parallel=True))
    assert on.stages[0].activation_bytes < off.stages[0].activation_bytes


@pytest.mark.parametrize("kwargs,match", [
    (dict(tensor=2, data=2, global_batch=4), "devices, but the cluster has 8"),
    (dict(tensor=8, global_batch=4), "does not divide dimension 'h'"),
    (dict(pipeline=8, global_batch=8, microbatch_size=1), None),
    (dict(tensor=3, data=1, pipeline=1, global_batch=3), "devices, but the cluster has 8"),
    (dict(pipeline=2, data=4, global_batch=12, microbatch_size=1, virtual_stages=2), "multiple of the 2 pipeline"),
    (dict(data=8, global_batch=12, microbatch_size=1), "multiple of 8"),
])
def test_impossible_configurations_name_the_constraint(kwargs, match):
    if match is None:
        evaluate_training(BUILD, _cluster(), Parallelism(**kwargs))  # 8 stages of a 4-block GPT: enough layers
        with pytest.raises(ConfigurationError, match="need at least 1,?000 layers|need at least"):
            evaluate_training(batch_builder("gpt", **{**SMALL, "layers": 1}), _cluster(1024, 8),
                              Parallelism(pipeline=1024, global_batch=1024))
        return
    with pytest.raises(ConfigurationError, match=match):
        evaluate_training(BUILD, _cluster(), Parallelism(**kwargs))


def test_groups_that_do_not_follow_the_nodes_are_refused():
    mesh = _cluster(24, 8).mesh  # 3 nodes x 8
    assert group_extents(mesh, (8, 3, 1), ("t", "d", "p")) == [(1, 8), (3, 1), (1, 1)]
    assert group_extents(mesh, (2, 4, 3), ("t", "d", "p")) == [(1, 2), (1, 4), (3, 1)]
    with pytest.raises(ConfigurationError, match="the t size 3 does not fit"):
        group_extents(mesh, (3, 8, 1), ("t", "d", "p"))


def test_attention_core_and_blocks_of_gpt():
    g = sample("gpt", batch=1, **SMALL)
    assert attention_core(g) == {f"h.{i}.attn.{n}" for i in range(4) for n in ("scores", "softmax")}
    b = blocks(g)
    assert b["h.2.attn.q"] == "h.2" and b["h.2.ln1"] == "h.2" and "wte" not in b and "ln_f" not in b


SPACE = dict(schedules=("1f1b", "gpipe", "interleaved"), virtual_stages=(2,), recompute=("none", "selective", "full"),
             zero=(0, 1, 2, 3), sequence_parallel=(False, True), microbatch_sizes=(1, 4))


def _brute_force(cluster, batch):
    """Every configuration of the search's space, each evaluated on its own."""
    out = []
    for t, c, p in itertools.product((1, 2, 4, 8), (1,), (1, 2, 4, 8)):
        if cluster.devices % (t * p):
            continue
        d = cluster.devices // (t * p)
        for b, sched, rc, z, sp in itertools.product(SPACE["microbatch_sizes"], SPACE["schedules"], SPACE["recompute"],
                                                     SPACE["zero"], SPACE["sequence_parallel"]):
            v = 2 if sched == "interleaved" else 1
            if (z and d == 1) or (sp and t == 1) or (sched != "1f1b" and p == 1):
                continue
            try:
                par = Parallelism(tensor=t, pipeline=p, data=d, context=c, microbatch_size=b, global_batch=batch,
                                  schedule=sched, virtual_stages=v, recompute=rc, zero=z, sequence_parallel=sp,
                                  overlap=cluster.efficiency is not None)
                out.append(evaluate_training(BUILD, cluster, par))
            except ConfigurationError:
                continue
    return out


@pytest.mark.parametrize("memory,calibrated", [(None, False), (0.12e9, False), (None, True)])
def test_joint_search_equals_brute_force(memory, calibrated):
    # Calibrated, the search overlaps the reductions and ZeRO-3's gathers: its bounds must hold for those too.
    from dataclasses import replace

    from pase.hardware.efficiency import A100_FITTED

    cluster = _cluster(8, 4, memory)
    if calibrated:
        cluster = replace(cluster, efficiency=A100_FITTED)
    found = search_training(BUILD, cluster, 16, **SPACE)
    every = [r for r in _brute_force(cluster, 16) if r.fits_memory is not False]
    assert found.best.fits_memory is not False
    assert found.best.step_time_s == pytest.approx(min(r.step_time_s for r in every))
    assert found.runners_up and all(r.step_time_s >= found.best.step_time_s for r in found.runners_up)
    # The bounds and the best-first order keep exactly the fastest few, not only the fastest.
    kept = [found.best, *found.runners_up]
    assert [r.step_time_s for r in kept] == pytest.approx(sorted(r.step_time_s for r in every)[:len(kept)])


def test_search_never_loses_to_data_parallelism_megatron_or_fsdp():
    cluster = _cluster(8, 4, 0.2e9)
    found = search_training(BUILD, cluster, 16)
    baselines = [Parallelism(data=8, global_batch=16, microbatch_size=2),
                 Parallelism(data=8, global_batch=16, microbatch_size=2, zero=3),
                 Parallelism(tensor=4, data=2, global_batch=16, microbatch_size=1, sequence_parallel=True),
                 Parallelism(tensor=2, pipeline=2, data=2, global_batch=16, microbatch_size=1, virtual_stages=2)]
    for par in baselines:
        got = evaluate_training(BUILD, cluster, par)
        if got.fits_memory:
            assert found.best.step_time_s <= got.step_time_s * (1 + 1e-9), par.describe()


def test_intra_stage_search_is_never_worse_than_megatron():
    cluster = _cluster(8, 4)
    plain = search_training(BUILD, cluster, 16, tensor=(2, 4), recompute=("none",), zero=(0,))
    searched = search_training(BUILD, cluster, 16, tensor=(2, 4), recompute=("none",), zero=(0,), intra_search=True)
    assert searched.best.step_time_s <= plain.best.step_time_s * (1 + 1e-9)


def test_a_search_that_cannot_fit_says_how_much_it_needs():
    from pase.model.memory import InsufficientMemoryError

    wide = batch_builder("gpt", layers=4, d_model=256, heads=4, seq=32, vocab=4096)
    with pytest.raises(InsufficientMemoryError, match="the least any needs is"):
        search_training(wide, _cluster(8, 4, 1e6), 16)


def test_pipeline_sends_each_crossing_tensor_once_over_the_network():
    # Tensor groups inside a node; the pipeline crosses nodes, so its sends go over the network.
    cluster = Cluster(8, 100e12, 100e9, 2, None, "t", mesh_axes=(MeshAxis("node", 2, 10e9), MeshAxis("gpu", 4, 100e9)))
    names = [layer.name for layer in BUILD(1).layers]
    cut = names.index("h.2.ln1")
    par = Parallelism(tensor=4, pipeline=2, global_batch=4, microbatch_size=1, stage_cuts=(cut,))
    got = evaluate_training(BUILD, cluster, par)
    # Only the residual stream (b s d = 1 x 32 x 64, 2 bytes) crosses, read by two layers but sent once,
    # a quarter per device, at 10 GB/s.
    assert got.stages[0].send_s == pytest.approx(32 * 64 * 2 / 4 / 10e9)
    assert got.stages[0].layers == (("wte", "h.1.add2"),)


def _block_activations(t, sp, recompute):
    from pase.models.megatron import megatron_gpt
    from pase.model.training import layer_times
    from pase.strategies.baselines import tensor_parallel_strategy

    g = megatron_gpt("k", layers=2, hidden=64, heads=4, batch=2, seq=32, vocab=128)
    par = Parallelism(tensor=t, global_batch=2, microbatch_size=2, sequence_parallel=sp, recompute=recompute)
    lt = layer_times(g, _cluster(t, t), tensor_parallel_strategy(g, t, 1, sp), par)
    return sum(a for layer, a in zip(lt.layers, lt.activations) if layer.name.startswith("h.1."))


@pytest.mark.parametrize("t", [1, 2, 4])
def test_activation_memory_of_a_gpt_layer_is_korthikantis(t):
    # Korthikanti et al., Table 2: bytes per transformer layer, 2-byte activations.
    s, b, h, a = 32, 2, 64, 4
    sbh, quad = s * b * h, 5 * a * s / h
    assert _block_activations(t, False, "none") == pytest.approx(sbh * (10 + 24 / t + quad / t))
    assert _block_activations(t, False, "full") == pytest.approx(2 * sbh)
    if t > 1:
        assert _block_activations(t, True, "none") == pytest.approx(sbh * (34 / t + quad / t))
        assert _block_activations(t, True, "selective") == pytest.approx(34 * sbh / t)
    else:
        assert _block_activations(1, False, "none") == pytest.approx(sbh * (34 + quad))


def test_a_tied_embedding_is_held_once_per_stage_and_its_gradient_summed_across_them():
    from pase.models.megatron import megatron_gpt

    def build(batch):
        return megatron_gpt("k", layers=2, hidden=64, heads=4, batch=batch, seq=32, vocab=128)

    params = build(1).parameter_count
    one = evaluate_training(build, _cluster(1, 1), Parallelism(global_batch=2))
    assert one.stages[0].weights_bytes == pytest.approx(2 * params)
    two = evaluate_training(build, _cluster(2, 1), Parallelism(pipeline=2, global_batch=2))
    assert sum(s.weights_bytes for s in two.stages) == pytest.approx(2 * (params + 128 * 64))
    # The two copies' gradients are all-reduced between the stages: 2 (k - 1)/k x 128 x 64 x 2 bytes at 10 GB/s.
    assert [s.reduce_s for s in two.stages] == pytest.approx([128 * 64 * 2 / 10e9] * 2)


def test_on_a_calibrated_cluster_the_search_overlaps_the_gradient_reduction_as_frameworks_do():
    from dataclasses import replace

    from pase.hardware.efficiency import CALCULON_A100

    calibrated = replace(_cluster(8, 4), efficiency=CALCULON_A100)
    found = search_training(BUILD, calibrated, 16, recompute=("none",), zero=(0,), microbatch_sizes=(1,))
    assert found.best.parallelism.overlap
    assert not search_training(BUILD, _cluster(8, 4), 16, recompute=("none",), zero=(0,),
                               microbatch_sizes=(1,)).best.parallelism.overlap


def test_zero3_gathers_one_layer_ahead_by_hand():
    from pase.model.training import _prefetched

    def run(gather, forward, backward=None):
        g, f = np.array(gather, float), np.array(forward, float)
        b = f if backward is None else np.array(backward, float)
        fq, bq = _prefetched(g, f, b, np.array([0]), np.array([len(g)]))
        return float(fq[0]), float(bq[0])

    # Gathers 1, 2, 1 and computes 3, 1, 1: the first gather is exposed, the others hide behind a compute.
    assert run([1, 2, 1], [3, 1, 1])[0] == 6
    # A gather is issued only as the layer before it starts: 3 s of gather after a 0.5 s layer is exposed,
    # though the first layer's 5 s could have hidden it with a deeper prefetch.
    assert run([1, 1, 3], [5, 0.5, 1])[0] == 10
    # The backward runs the layers in reverse: gather layer 1 (0..1), its backward 1..4 while layer 0's
    # gather runs 1..3, layer 0's backward 4..5, then its reduce-scatter 5..7 (layer 1's, 4..5, on its own
    # stream).
    assert run([2, 1], [0, 0], [1, 3])[1] == 7
    assert run([0, 0, 0], [1, 2, 3]) == (6, 6)
    # No compute: the gathers back to back, and the backward's gathers and reduce-scatters share the links.
    assert run([1, 2, 3], [0, 0, 0]) == (6, 12)
    # Runs are independent: two stages of one layer each.
    fq, bq = _prefetched(np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([5.0, 6.0]), np.array([0, 1]),
                         np.array([1, 2]))
    assert list(fq) == [4, 6] and list(bq) == [7, 10]


def test_overlapped_zero3_stages_lie_between_their_streams_and_the_serial_sum():
    from dataclasses import replace

    from pase.ir.configs import ConfigOptions
    from pase.model.memory import MemoryOptions
    from pase.model.training import _stage_sums, cached_times, check_devices

    cluster = _cluster(8, 4)
    serial = Parallelism(data=8, global_batch=16, microbatch_size=2, zero=3, pipeline=1)
    lt = cached_times(BUILD, cluster, serial, ConfigOptions(), MemoryOptions(), {})["none"]
    for p in (1, 2):
        par = replace(serial, data=8 // p, pipeline=p, global_batch=16 // p)
        zero3 = tuple(check_devices(par, cluster)[1])
        g = cluster.mesh.allgather_s(lt.params * cluster.bytes_per_element, np.tile(zero3, (len(lt.params), 1)))
        assert np.any(g > 0)
        cuts, f_serial, b_serial = _stage_sums(lt, cluster, par, zero3, None, 0)
        _, fq, bq = _stage_sums(lt, cluster, replace(par, overlap=True, stage_cuts=cuts), zero3, None, 0)
        bounds = [0, *cuts, len(lt.params)]
        for q in range(len(fq)):
            lo, hi = bounds[q], bounds[q + 1]
            f, b, gq = lt.forward_s[lo:hi].sum(), lt.backward_s[lo:hi].sum(), g[lo:hi].sum()
            # The serial sums hold every gather and reduce-scatter; overlapped, neither stream can do less.
            assert f_serial[q] == pytest.approx(f + gq) and b_serial[q] == pytest.approx(b + 2 * gq)
            assert max(f, gq) * (1 - 1e-12) <= fq[q] <= f_serial[q] * (1 + 1e-12)
            assert max(b, 2 * gq) * (1 - 1e-12) <= bq[q] <= b_serial[q] * (1 + 1e-12)

"""Repeated blocks are costed once: the costs, memory and step times equal those of the same graph with
every layer made distinct (so nothing is shared), to the last bit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pase.hardware.cluster import preset
from pase.ir.graph import Graph
from pase.model.cost import build_cost_model
from pase.model.memory import MemoryOptions, activation_bytes
from pase.ir.configs import ConfigOptions
from pase.model.training import RECOMPUTE, Parallelism, assemble, attention_core, blocks, layer_times
from pase.models import sample
from pase.strategies.baselines import tensor_parallel_strategy


def _distinct(graph: Graph) -> Graph:
    """``graph`` with every layer's signature made unique (a parameter no op reads), wiring kept."""
    out = Graph(graph.name)
    for i, layer in enumerate(graph.layers):
        feeds = {e.dst_input: (e.src, e.src_output) for e in graph.in_edges(layer.name)}
        inputs = [feeds.get(slot) for slot in range(max(feeds, default=-1) + 1)]
        out.add_layer(replace(layer, params=layer.params + (("_copy", i),)), inputs=inputs)
    return out


def test_signatures_find_the_blocks_of_a_transformer():
    graph = sample("megatron-1.7b", batch=1)
    kinds = {graph.kind(l.name) for l in graph.layers}
    # 24 identical blocks of 16 vertices: one kind per vertex of a block, plus embedding and head ones.
    block_kinds = {graph.kind(l.name) for l in graph.layers if l.name.startswith("layers.")}
    assert len(block_kinds) <= 16 < len(graph)
    assert all(graph.kind(f"layers.0.{rest}") == graph.kind(f"layers.23.{rest}")
               for rest in (l.name.split(".", 2)[2] for l in graph.layers if l.name.startswith("layers.0.")))
    assert len(kinds) < 30
    assert len({_distinct(graph).kind(l.name) for l in graph.layers}) == len(graph)


@pytest.mark.parametrize("name", ["transformer", "gpt", "resnet101"])
def test_cost_model_of_repeated_blocks_equals_the_unshared_one(name):
    graph = sample(name, batch=8)
    cluster = preset("dgx-a100", devices=8, calibrated=True)
    shared, alone = build_cost_model(graph, cluster), build_cost_model(_distinct(graph), cluster)
    for layer in graph.layers:
        for table in ("compute_s", "forward_compute_s", "comm_s", "gradient_comm_s", "compute_flops"):
            assert np.array_equal(getattr(shared, table)[layer.name], getattr(alone, table)[layer.name]), (layer, table)
    for (e, a), (_, b) in zip(shared.edge_tables, alone.edge_tables, strict=True):
        assert np.array_equal(a, b), e


@pytest.mark.parametrize("t,sp", [(1, False), (4, False), (4, True)])
def test_training_step_of_repeated_blocks_equals_the_unshared_one(t, sp):
    graph = sample("megatron-1.7b", batch=2)
    twin = _distinct(graph)
    cluster = preset("dgx-a100", devices=16, calibrated=True)
    par = Parallelism(tensor=t, pipeline=2, data=8 // t, microbatch_size=2, global_batch=2 * 8 // t * 4,
                      sequence_parallel=sp, overlap=True)
    strategy = tensor_parallel_strategy(graph, t, 1, sp)
    got = layer_times(graph, cluster, strategy, par, recompute=RECOMPUTE)
    want = layer_times(twin, cluster, strategy, par, recompute=RECOMPUTE)
    for mode in RECOMPUTE:
        for field in ("forward_s", "backward_s", "recompute_s", "gradient_s", "params", "activations", "buffers"):
            assert np.array_equal(getattr(got[mode], field), getattr(want[mode], field)), (mode, field)
        assert got[mode].model_flops == want[mode].model_flops
        a = assemble(got[mode], cluster, replace(par, recompute=mode), MemoryOptions(), None)
        b = assemble(want[mode], cluster, replace(par, recompute=mode), MemoryOptions(), None)
        assert a.step_time_s == b.step_time_s and a.memory_per_device_bytes == b.memory_per_device_bytes


def test_activation_bytes_of_repeated_blocks_equal_the_unshared_ones():
    graph = sample("gpt", batch=4)
    twin = _distinct(graph)
    configs = {name: np.array([cfg]) for name, cfg in tensor_parallel_strategy(graph, 4, 1, True).items()}
    for kw in ({}, {"producer_blocks": True}, {"dropped": attention_core(graph)}, {"checkpoints": blocks(graph)}):
        got, want = activation_bytes(graph, configs, 2, **kw), activation_bytes(twin, configs, 2, **kw)
        assert all(np.array_equal(got[n], want[n]) for n in got), kw


def test_alike_layers_in_different_surroundings_keep_their_own_bytes():
    from pase import ops

    graph = Graph("fork")
    graph.add_layer(ops.fully_connected("x", b=8, n=16, c=16))
    for name, src in (("left", "x"), ("right", "x"), ("after", "left")):  # three layers of one kind
        graph.add_layer(ops.fully_connected(name, b=8, n=16, c=16), inputs=[src])
    assert graph.kind("left") == graph.kind("right") == graph.kind("after")
    configs = {l.name: np.array([[1, 1, 1], [2, 1, 1]]) for l in graph.layers}
    got, want = activation_bytes(graph, configs, 2), activation_bytes(_distinct(graph), configs, 2)
    assert all(np.array_equal(got[n], want[n]) for n in got)
    # Two readers share x's copy; "after" alone keeps "left"'s output: 8 x 16 elements of 2 bytes, unsplit.
    assert got["after"][0] == 2 * got["left"][0] == 8 * 16 * 2


def _same_times(got, want) -> None:
    """Every field of two LayerTimes equal, to the last bit."""
    from dataclasses import fields

    from pase.model.training import LayerTimes

    for f in fields(LayerTimes):
        x, y = getattr(got, f.name), getattr(want, f.name)
        if f.name == "memo":
            continue
        if f.name == "graph":
            assert x is y
        elif f.name == "layers":
            assert [l.name for l in x] == [l.name for l in y]
        elif f.name == "tied":
            assert len(x) == len(y) and all(np.array_equal(a, c) and np.array_equal(b, d)
                                            for (a, b), (c, d) in zip(x, y)), f.name
        elif isinstance(x, np.ndarray):
            assert np.array_equal(x, y), f.name
        else:
            assert x == y, f.name


@pytest.mark.parametrize("name,calibrated", [("megatron-1.7b", False), ("llama3-8b", True), ("mixtral-8x7b", True)])
@pytest.mark.parametrize("t,sp", [(1, False), (4, True)])
def test_times_costed_on_three_blocks_equal_those_of_the_whole_model(name, calibrated, t, sp):
    from pase.model.repeats import periodic_core
    from pase.model.training import cached_times

    graph = sample(name, batch=2)
    core = periodic_core(graph, blocks(graph))
    # The run covers every transformer layer, shortened to three.
    numbered = [l.name.split(".")[:2] for l in graph.layers if l.name.split(".")[0] in ("h", "layers")]
    size = sum(1 for _, i in numbered if i == "0")
    assert core is not None and core.blocks == len({i for _, i in numbered})
    assert len(core.graph) == len(graph) - (core.blocks - 3) * size
    cluster = preset("dgx-a100", devices=16, calibrated=calibrated)
    par = Parallelism(tensor=t, data=16 // t, microbatch_size=2, global_batch=32, sequence_parallel=sp)
    got = cached_times(lambda b: graph, cluster, par, ConfigOptions(), MemoryOptions(), {})
    want = layer_times(graph, cluster, tensor_parallel_strategy(graph, t, 1, sp), par, ConfigOptions(),
                       MemoryOptions(), recompute=RECOMPUTE)
    for mode in RECOMPUTE:
        _same_times(got[mode], want[mode])


def test_blocks_read_from_outside_their_neighbours_are_not_shortened():
    from pase import ops as L
    from pase.model.repeats import periodic_core

    def chain(blocks_read_embed: bool = False, odd: int | None = None) -> Graph:
        g = Graph("chain")
        g.add_layer(L.fully_connected("embed", b=4, n=8, c=8))
        prev = "embed"
        for i in range(6):
            g.add_layer(L.fully_connected(f"h.{i}.fc", b=4, n=8, c=16 if i == odd else 8), inputs=[prev])
            if blocks_read_embed:
                g.add_layer(L.elementwise(f"h.{i}.out", (4, 8), ("b", "n")), inputs=[f"h.{i}.fc", "embed"])
            else:
                g.add_layer(L.fully_connected(f"h.{i}.out", b=4, n=8, c=8), inputs=[f"h.{i}.fc"])
            prev = f"h.{i}.out"
        g.add_layer(L.elementwise("head", (4, 8), ("b", "n")), inputs=[prev, "embed"])  # a head may read anything
        return g

    plain = chain()
    core = periodic_core(plain, blocks(plain))
    # The six blocks form the run (the embedding feeds the first as a block would); the core keeps 0, 1 and 5.
    assert core is not None and core.blocks == 6 and len(core.graph) == len(plain) - 3 * 2
    assert [l.name for l in core.graph.layers][core.representative[plain.layers.index(plain.layer("h.4.fc"))]] \
        == "h.1.fc"
    # An input every block reads (the embedding) ends the run at once; so does a block unlike the others.
    for graph in (chain(blocks_read_embed=True), chain(odd=3)):
        assert periodic_core(graph, blocks(graph)) is None

"""DeepEP's token dispatch (pase.model.experts.deepep_fanout and block_costs under dispatcher="deepep"), group-limited
routing in the graph, and the dispatcher on the CLI and in the Megatron export.

References: hand counts; the hypergeometric count of the nodes a uniformly routed token reaches; Megatron-Core's own
routing function (``topk_routing_with_score_function``, with its group-limited top-k) run on random logits, as
NVIDIA's forced-balance benchmarks route.
"""

from math import comb

import pytest

from pase.cli import main
from pase.errors import ConfigurationError, GraphError
from pase.hardware.cluster import preset
from pase.model.experts import block_costs, deepep_fanout, expert_layout, moe_blocks
from pase.model.training import Parallelism
from pase.models import sample
from pase.ops.moe import moe_router

# DeepSeek-V3 on the H100 row of section 3b: 256 experts top-8, 8 router groups choosing 4, EP 64 over 8 nodes.
DSV3 = dict(experts=256, top_k=8, groups=8, group_topk=4, nodes=8, ranks_per_node=8)


def test_a_token_with_one_expert_reaches_one_node_and_one_gpu():
    # 8 experts on 2 nodes of 4 GPUs, top-1: the token's one expert is on another node half the time, and on another
    # GPU than the one it lands on (its own index there) three times in four.
    remote, nvlink = deepep_fanout(8, 1, 1, 1, 2, 4)
    assert remote == pytest.approx(1 / 2) and nvlink == pytest.approx(3 / 4)


@pytest.mark.parametrize("experts, k, nodes, ranks", [(256, 8, 8, 8), (128, 8, 4, 8), (64, 6, 2, 8), (128, 4, 8, 2)])
def test_uniform_routing_reaches_the_hypergeometric_count_of_nodes_and_gpus(experts, k, nodes, ranks):
    # Without groups, random logits pick k of E experts uniformly: a unit holding u experts is missed with
    # probability C(E - u, k) / C(E, k).
    def reached(units: int) -> float:
        u = experts // units
        return units * (1 - comb(experts - u, k) / comb(experts, k))
    remote, nvlink = deepep_fanout(experts, k, 1, 1, nodes, ranks)
    assert remote == pytest.approx(reached(nodes) * (nodes - 1) / nodes, rel=0.02)
    assert nvlink == pytest.approx(reached(nodes * ranks) * (ranks - 1) / ranks, rel=0.02)


def test_node_limited_routing_matches_megatron_cores_own_routing():
    torch = pytest.importorskip("torch")
    moe_utils = pytest.importorskip("megatron.core.transformer.moe.moe_utils")
    torch.manual_seed(1)
    tokens, e = 8192, DSV3
    _, routed = moe_utils.topk_routing_with_score_function(
        torch.randn(tokens, e["experts"]), e["top_k"], num_groups=e["groups"], group_topk=e["group_topk"],
        scaling_factor=2.5, score_function="sigmoid")
    gpus = e["nodes"] * e["ranks_per_node"]
    nodes = routed.view(tokens, e["nodes"], -1).any(-1).sum(-1).double().mean().item()
    ranks = routed.view(tokens, gpus, -1).any(-1).sum(-1).double().mean().item()
    remote, nvlink = deepep_fanout(**e)
    assert remote == pytest.approx(nodes * 7 / 8, rel=0.01)
    assert nvlink == pytest.approx(ranks * 7 / 8, rel=0.01)
    # A token never reaches more than its 4 chosen groups (here one node each), and nearly always all of them: a
    # group is chosen for the sum of its best two scores, so it holds some of the token's best experts.
    assert 0.95 * 4 * 7 / 8 <= remote <= 4 * 7 / 8
    # Without the limit the same token copies reach 4.6 other nodes.
    assert deepep_fanout(256, 8, 1, 1, 8, 8)[0] > 4.5


def _dsv3_h100(dispatcher: str):
    par = Parallelism(tensor=2, pipeline=8, data=64, microbatch_size=1, global_batch=8192, sequence_parallel=True,
                      ep=64, etp=1, dispatcher=dispatcher)
    cluster = preset("dgx-h100", 1024, calibrated=True)
    block = moe_blocks(sample("deepseek-v3", batch=1, seq=4096))[0]
    return block_costs(block, par, cluster, expert_layout(par, cluster.mesh), "fp8"), block


def test_deepep_prices_the_network_share_of_the_tokens_it_reaches_by_hand():
    costs, block = _dsv3_h100("deepep")
    assert (block.groups, block.group_topk) == (8, 4)
    remote, nvlink = deepep_fanout(**DSV3)
    tokens, row = 4096 / 2, 7168 * 2  # a device's sequence-parallel share of the microbatch; BF16 rows
    # By hand, the preset's published NCCL bus bandwidths: 47 GB/s a GPU across nodes (NDR), 370.8 GB/s over NVLink,
    # a step's latency each; the two shares at once, the longer timing the exchange.
    network = tokens * remote * row / 47e9 + 10e-6
    local = tokens * nvlink * row / 370.8e9 + 5e-6
    assert network > local
    # Dispatch and combine, forward and backward: four exchanges (ETP 1 gathers nothing).
    assert costs["dispatch_s"] == pytest.approx(4 * network, rel=1e-9)
    assert costs["tokens_across_nodes"] == pytest.approx(tokens * remote)


def test_deepep_sends_half_the_network_bytes_of_the_all_to_all_for_deepseek_v3():
    deepep, _ = _dsv3_h100("deepep")
    alltoall, _ = _dsv3_h100("alltoall")
    # The all-to-all sends each of 8 copies, 7 in 8 of them to another node; DeepEP 3.5 tokens a token.
    assert alltoall["tokens_across_nodes"] == pytest.approx(4096 / 2 * 8 * 7 / 8)
    assert deepep["tokens_across_nodes"] / alltoall["tokens_across_nodes"] == pytest.approx(3.47 / 7, rel=0.02)
    assert deepep["dispatch_s"] < 0.55 * alltoall["dispatch_s"]
    # What the experts compute and hold does not depend on how the tokens reached them.
    for key in ("compute_s", "activations", "params", "expert_tokens"):
        assert deepep[key] == alltoall[key]


def test_a_router_s_groups_must_divide_its_experts_and_leave_enough_to_choose():
    with pytest.raises(GraphError, match="router groups"):
        moe_router("r", 1, 64, 16, experts=12, top_k=2, capacity=8, groups=5, group_topk=2)
    with pytest.raises(GraphError, match="router groups"):
        moe_router("r", 1, 64, 16, experts=16, top_k=8, capacity=8, groups=8, group_topk=3)  # 3 x 2 < 8
    # An unlimited router keeps the params it always had (saved graphs and plans unchanged).
    assert "groups" not in moe_router("r", 1, 64, 16, experts=16, top_k=2, capacity=8).param_dict


@pytest.mark.parametrize("change, named", [(dict(dispatcher="nccl"), "unknown token dispatcher"),
                                           (dict(dispatcher="deepep", capacity_factor=1.0), "DeepEP keeps every")])
def test_a_dispatcher_it_cannot_price_is_refused_in_one_line(change, named):
    with pytest.raises(ConfigurationError, match=named) as exc:
        Parallelism(data=8, ep=8, **change)
    assert "\n" not in str(exc.value)


EVALUATE = ["evaluate", "deepseek-v3", "--devices", "1024", "--cluster", "dgx-h100", "--tp", "2", "--pp", "8", "--sp",
            "--ep", "64", "--etp", "1", "--global-batch", "8192", "--microbatch-size", "1", "--seq", "4096",
            "--precision", "fp8"]


def test_the_cli_prices_and_reports_the_deepep_dispatch(capsys):
    import json

    assert main([*EVALUATE, "--dispatcher", "deepep", "--json"]) == 0
    deepep = json.loads(capsys.readouterr().out)
    assert main([*EVALUATE, "--json"]) == 0
    alltoall = json.loads(capsys.readouterr().out)
    assert deepep["experts"]["dispatcher"] == "deepep" and alltoall["experts"]["dispatcher"] == "alltoall"
    assert deepep["experts"]["dispatch_s_per_step"] < 0.55 * alltoall["experts"]["dispatch_s_per_step"]
    assert deepep["step_time_s"] < alltoall["step_time_s"]
    assert main([*EVALUATE, "--dispatcher", "deepep"]) == 0
    assert "each DeepEP exchange sends" in capsys.readouterr().out


def test_deepep_with_token_drop_on_the_cli_is_one_line(capsys):
    assert main([*EVALUATE, "--dispatcher", "deepep", "--capacity-factor", "1"]) == 2
    err = capsys.readouterr().err
    assert "DeepEP keeps every token" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_the_cli_reports_what_of_the_dispatch_the_overlap_leaves_exposed(capsys):
    import json

    assert main([*EVALUATE, "--dispatcher", "deepep", "--ep-overlap", "--json"]) == 0
    overlapped = json.loads(capsys.readouterr().out)["experts"]
    assert main([*EVALUATE, "--dispatcher", "deepep", "--json"]) == 0
    exposed = json.loads(capsys.readouterr().out)["experts"]
    assert exposed["dispatch_exposed_s_per_step"] == exposed["dispatch_s_per_step"]
    assert 0 < overlapped["dispatch_exposed_s_per_step"] < overlapped["dispatch_s_per_step"]
    assert main([*EVALUATE, "--dispatcher", "deepep", "--ep-overlap"]) == 0
    assert "overlapped with another microbatch's layer" in capsys.readouterr().out

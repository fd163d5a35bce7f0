"""Today's published runs against the model: section 3 of published-measurements.md, predicted, never fitted.

Every dense row of sections 3a (NeMo 24.07, DGX H100) and 3b (Megatron-Bridge 25.09, DGX H100 and
B200) but Nemotron-8B and -22B (the table gives no architecture for them), evaluated with ``pase
evaluate``'s model (``pase.model.training.evaluate_training``) on the preset's calibration as it
stands: no figure of it was fitted to these step times (BENCHMARKS.md, "Today's runs against the
model", says where each comes from). A row's measured step is GBS x sequence / (tokens/s/GPU x GPUs).

How the rows ran, from the tables' own notes (published-measurements.md, section 3): Megatron-Core
with Transformer Engine; FP8 products (:attr:`Row.precision`: 3a says FP8, of Transformer Engine's default
recipe then, delayed scaling; 3b's are FP8 with current per-tensor scaling: the scripts of that release run
the mixtures of experts in ``bf16``, ``fp8_cs`` or a block-scaled recipe only, the table's parentheses
being the block-scaled runs (``configs/*/*_llm_pretrain.yaml``'s ``perf_matrix``), and the 25.11 table
names the same dense runs FP8-CS at the same throughputs within 4%; the table's parentheses, the B200 runs
again in MXFP8, are rows of their own, ``MXFP8_RUNS``, outside section 3's figures); FlashAttention (cuDNN fused
attention); the distributed optimizer (ZeRO-1; FSDP rows ZeRO-3 over their data-parallel ranks);
the gradient reduce-scatter and parameter all-gather overlapped; tensor-parallel communication
overlapped, with sequence parallelism wherever tensor parallelism is (Megatron-Core requires it for
its overlap); the interleaved schedule where VP > 1; no activation recomputation (none is listed).
Stage cuts: between whole transformer blocks, as Megatron-Core splits them without a layout
(:func:`megatron_split`: evenly, or evenly with the embedding and the loss counted as blocks where the recipe
says so), or the recipe's own layout.

The mixture-of-experts rows of 3b (DeepSeek-V3, Qwen3-30B-A3B, Qwen3-235B-A22B on H100 and B200) as
Megatron-Core lays them out (``pase.model.experts``) and as Megatron-Bridge's performance scripts of that
release set them (NVIDIA-NeMo/Megatron-Bridge v0.1.0rc3/rc4, ``scripts/performance/run_script.py`` and
``scripts/performance/configs/*/*_llm_pretrain.yaml``; rc3's Qwen3-30B VP 24 and rc4's DeepSeek-V3 B200
TP 1 PP 16 are the table's): the table's EP, expert tensor parallelism 1 (the yaml's ``etp: 1``), the
dispatch in BF16 (Megatron-Core 0.16 sends no FP8: ``fused_a2a.py``, "we do not support fp8 dispatch"),
grouped expert products; "dropless" rows force-balanced (imbalance 1; the script's
``moe_router_force_load_balancing``), "tokendrop" rows at capacity factor 1 padded to capacity
(``apply_moe_token_drop``); DeepSeek-V3 with its multi-token-prediction module (the recipe's
``mtp_num_layers`` default 1, ``recipes/deepseek/deepseek_v3.py``; the 25.11 table names the same B200 run "w/
MTP") and the recipe's pipeline layouts (H100 ``Et|(tt|)*30mL``: the embedding and one block, 30 virtual
stages of two, the prediction module with the loss; B200 ``map_pp_vp_to_layout[(16, 1)]``: four blocks a
stage, the last one block, the module and the loss). Recomputation as
the script sets it: DeepSeek-V3 on H100 ``recompute_modules ["mla_up_proj", "mlp"]``, on B200
``["mla_up_proj"]`` (selective, ``pase.model.recompute``); the Qwen3 yamls ``recompute_granularity:
null`` (none). DeepSeek-V3 on H100 runs the 1F1B all-to-all overlap (``overlap_moe_expert_parallel_comm``)
and no gradient-reduce overlap (``overlap_grad_reduce = False``); on B200 the shared experts beside the all-to-all
(``moe_shared_expert_overlap = True`` where the 1F1B overlap is off, ``run_script.py``); the other rows expose the
dispatch.
DeepSeek-V3 on H100 dispatches with DeepEP (``run_script.py``'s ``enable_deepep`` on H100 without token
drop: Megatron-Core's flex dispatcher, ``recipes/deepseek/deepseek_v3.py``), with its router's node-limited
routing (8 groups, 4 chosen: the provider's ``moe_router_num_groups`` and ``moe_router_group_topk``, applied to
the forced-balance random logits); the other rows drop tokens, which DeepEP does not, and use the all-to-all.

Beside section 3, GPT-OSS 120B as Megatron-Bridge 26.02 ran it (``LATER_RUNS``: the release's performance scripts,
v0.3.0; BF16, ``recompute_modules ["layernorm", "moe_act"]``, the all-to-all dispatcher, no CUDA graphs, no layout:
Megatron-Core's even split), out of sample and outside section 3's figures.

Writes its section of BENCHMARKS.md and the rows' measured and predicted steps into
``pase/hardware/data/validation.json``, which ``pase`` quotes beside a plan's step (:mod:`pase.hardware.accuracy`;
``tests/test_accuracy.py`` keeps it equal to today's predictions). ``--no-write``: print the section only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import time
from dataclasses import dataclass, replace

from _report import machine, publish

from pase.errors import PaseError
from pase.frameworks import block_layout, framework_cuts
from pase.frameworks.megatron import MEGATRON
from pase.hardware.accuracy import VALIDATION
from pase.hardware.cluster import preset
from pase.ir.configs import ConfigOptions
from pase.model.training import Parallelism, TrainingPlan, evaluate_training
from pase.models import SAMPLES, batch_builder

SECTION = "## Today's runs against the model (section 3, out of sample)"
# The goals: mean and largest absolute error of the predicted step times.
GOALS = (0.10, 0.20)


@dataclass(frozen=True)
class Row:
    """One published run: where it is from, the sample, the cluster and its configuration, its tokens/s/GPU."""

    source: str
    label: str
    sample: str
    cluster: str
    gpus: int
    gbs: int
    mbs: int
    seq: int
    tp: int
    pp: int
    cp: int
    vp: int
    fsdp: int
    tokens_per_gpu_s: float
    ep: int = 1
    tokendrop: bool = False
    recompute_modules: tuple[str, ...] | None = None  # the recipe's selective recomputation (None: none)
    ep_overlap: bool = False  # the recipe's 1F1B all-to-all overlap
    grad_overlap: bool = True  # the recipe overlaps the gradient reduce-scatter
    mtp: int = 0  # the recipe's multi-token-prediction modules
    layout: tuple[int, ...] | None = None  # the recipe's blocks per virtual stage (None: balanced whole blocks)
    deepep: bool = False  # the recipe's DeepEP (flex) token dispatcher
    shared_overlap: bool = False  # the recipe's shared experts beside the all-to-all (moe_shared_expert_overlap)
    run_precision: str = ""  # the run's precision where its table names another than its source's (see precision)

    @property
    def precision(self) -> str:
        """The precision the run used (the module docstring): FP8 in delayed scaling in 3a, in current scaling in
        3b, MXFP8 in the 3b table's parentheses and BF16 in the GPT-OSS runs of 26.02 (``run_precision``)."""
        return self.run_precision or ("fp8-cs" if self.source == _3B else "fp8")

    @property
    def in_section_3(self) -> bool:
        """Whether the run is one of published-measurements.md's section 3 (its table's parentheses and the later
        releases' runs are not)."""
        return self.source in (_3A, _3B) and not self.run_precision

    @property
    def measured_step_s(self) -> float:
        """The step the throughput implies: GBS x sequence / (tokens/s/GPU x GPUs)."""
        return self.gbs * self.seq / (self.tokens_per_gpu_s * self.gpus)


_3A, _3B = "3a NeMo 24.07", "3b Megatron-Bridge 25.09"
SECTION_3 = (
    Row(_3A, "GPT3-5B", "gpt3-5b", "dgx-h100", 64, 2048, 4, 2048, 1, 1, 1, 1, 0, 22521),
    Row(_3A, "GPT3-20B", "gpt3-20b", "dgx-h100", 64, 256, 2, 2048, 2, 1, 1, 1, 0, 5851),
    Row(_3A, "GPT3-175B (128)", "gpt3-175b", "dgx-h100", 128, 256, 1, 2048, 4, 8, 1, 6, 0, 726),
    Row(_3A, "GPT3-175B (512)", "gpt3-175b", "dgx-h100", 512, 2048, 2, 2048, 4, 8, 1, 6, 0, 782),
    Row(_3A, "Llama 2 7B", "llama2-7b", "dgx-h100", 8, 128, 1, 4096, 1, 1, 1, 1, 0, 16847),
    Row(_3A, "Llama 2 13B", "llama2-13b", "dgx-h100", 16, 128, 1, 4096, 1, 4, 1, 10, 0, 8646),
    Row(_3A, "Llama 2 70B", "llama2-70b", "dgx-h100", 64, 128, 1, 4096, 4, 4, 1, 20, 0, 1707),
    Row(_3A, "Nemotron-340B", "nemotron4-340b", "dgx-h100", 128, 32, 1, 4096, 8, 8, 1, 12, 0, 322),
    Row(_3A, "Llama 3 8B", "llama3-8b", "dgx-h100", 8, 128, 1, 8192, 1, 1, 2, 1, 0, 12036),
    Row(_3A, "Llama 3 70B", "llama3-70b", "dgx-h100", 64, 128, 1, 8192, 4, 4, 2, 5, 0, 1533),
    Row(_3B, "Llama 3 8B (FSDP)", "llama3-8b", "dgx-h100", 8, 128, 1, 8192, 1, 1, 1, 1, 8, 14079),
    Row(_3B, "Llama 3 70B", "llama3-70b", "dgx-h100", 64, 128, 1, 8192, 4, 8, 1, 5, 0, 1619),
    Row(_3B, "Llama 3.1 405B", "llama3-405b", "dgx-h100", 1024, 512, 1, 8192, 8, 8, 2, 8, 0, 302),
    Row(_3B, "Llama 3 8B (B200)", "llama3-8b", "dgx-b200", 8, 128, 2, 8192, 1, 1, 1, 1, 0, 29994),
    Row(_3B, "Llama 3.1 405B (B200)", "llama3-405b", "dgx-b200", 128, 64, 1, 8192, 4, 8, 2, 8, 0, 664),
    Row(_3B, "DeepSeek-V3 (dropless)", "deepseek-v3", "dgx-h100", 1024, 8192, 1, 4096, 2, 8, 1, 4, 0, 1297, ep=64,
        recompute_modules=("mla_up_proj", "mlp"), ep_overlap=True, grad_overlap=False, mtp=1,
        layout=(1,) + (2,) * 30 + (1,), deepep=True),
    Row(_3B, "Qwen3-30B-A3B (tokendrop)", "qwen3-30b-a3b", "dgx-h100", 16, 512, 2, 4096, 1, 2, 1, 24, 0, 10494, ep=8,
        tokendrop=True),
    Row(_3B, "Qwen3-235B-A22B (tokendrop)", "qwen3-235b-a22b", "dgx-h100", 256, 2048, 1, 4096, 2, 8, 1, 4, 0, 1204,
        ep=32, tokendrop=True),
    Row(_3B, "DeepSeek-V3 (B200, tokendrop)", "deepseek-v3", "dgx-b200", 256, 2048, 1, 4096, 1, 16, 1, 1, 0, 2265,
        ep=8, tokendrop=True, recompute_modules=("mla_up_proj",), mtp=1, layout=(4,) * 15 + (2,), shared_overlap=True),
    Row(_3B, "Qwen3-30B-A3B (B200, tokendrop)", "qwen3-30b-a3b", "dgx-b200", 8, 512, 1, 4096, 1, 1, 1, 1, 0, 18066,
        ep=8, tokendrop=True),
    Row(_3B, "Qwen3-235B-A22B (B200, tokendrop)", "qwen3-235b-a22b", "dgx-b200", 64, 1024, 1, 4096, 1, 8, 1, 2, 0,
        4104, ep=8, tokendrop=True),
)
# The B200 runs of 3b again in MXFP8: the 25.09 table's parentheses ("different quantization granularities":
# the performance scripts' fp8_mx, 32-element blocks; the 25.11 table names the same B200 runs FP8-MX), from
# NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md; not in published-measurements.md.
# GPT-OSS 120B, the mixture of experts of issue 27 that section 3 lacks, as Megatron-Bridge 26.02 ran it on 64 H100
# and 64 B200 GPUs (NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, 26.02; the same configurations at
# 5,810-5,993 tokens/s/GPU on the H100 in 26.02 to 26.04.01, pase.hardware.published_runs): BF16, dropless and
# force-balanced, the all-to-all dispatcher, recomputing the normalisations and the experts' activation, as the
# release's scripts set them (v0.3.0 ``configs/gpt_oss/gpt_oss_workload_base_configs.py``: ``*_H100_BF16_V2`` PP 4,
# EP 8; ``*_B200_BF16_V2`` EP 64, MBS 4; ``recompute_modules ["layernorm", "moe_act"]``; the provider's
# ``moe_token_dispatcher_type "alltoall"``; no CUDA graphs on either). Out of sample, outside section 3's figures.
_26_02 = "Megatron-Bridge 26.02"
LATER_RUNS = (
    Row(_26_02, "GPT-OSS 120B", "gpt-oss-120b", "dgx-h100", 64, 1280, 1, 4096, 1, 4, 1, 1, 0, 5993, ep=8,
        recompute_modules=("layernorm", "moe_act"), run_precision="bf16"),
    Row(_26_02, "GPT-OSS 120B (B200)", "gpt-oss-120b", "dgx-b200", 64, 1280, 4, 4096, 1, 1, 1, 1, 0, 8047, ep=64,
        recompute_modules=("layernorm", "moe_act"), run_precision="bf16"),
)
MXFP8_RUNS = {"Llama 3 8B (B200)": 29388, "Llama 3.1 405B (B200)": 622, "DeepSeek-V3 (B200, tokendrop)": 2159,
              "Qwen3-235B-A22B (B200, tokendrop)": 4275}
ROWS = SECTION_3 + tuple(replace(r, label=f"{r.label[:-1]}, MXFP8)", tokens_per_gpu_s=MXFP8_RUNS[r.label],
                                 run_precision="mxfp8") for r in SECTION_3 if r.label in MXFP8_RUNS) + LATER_RUNS


def parallelism(row: Row) -> Parallelism:
    """The row's configuration as pase models it (the module docstring)."""
    dp = row.gpus // (row.tp * row.pp * row.cp)
    return Parallelism(tensor=row.tp, pipeline=row.pp, context=row.cp, data=dp, virtual_stages=row.vp,
                       microbatch_size=row.mbs, global_batch=row.gbs, sequence_parallel=row.tp > 1,
                       zero=3 if row.fsdp else 1, overlap=row.grad_overlap, tp_overlap=row.tp > 1,
                       tp_comm_overlap=row.tp > 1, ep=row.ep, etp=1 if row.ep > 1 else None,
                       capacity_factor=1.0 if row.tokendrop else None,
                       recompute="selective" if row.recompute_modules else "none",
                       recompute_modules=row.recompute_modules, expert_overlap=row.ep_overlap,
                       dispatcher="deepep" if row.deepep else "alltoall", shared_expert_overlap=row.shared_overlap)


def megatron_split(blocks: int, pieces: int) -> tuple[int, ...] | None:
    """Blocks per virtual stage as Megatron-Core splits ``blocks`` over ``pieces`` without a layout: evenly
    (``get_num_layers_to_build``), or where they do not divide, evenly with the embedding and the loss each
    counted as a block (``account_for_embedding_in_pipeline_split`` and ``account_for_loss_in_pipeline_split``,
    which the recipes that need it set: Megatron-Bridge's ``llama31_405b.py`` and ``qwen3_235b_a22b.py``);
    None when neither divides."""
    if blocks % pieces == 0:
        return (blocks // pieces,) * pieces
    if (blocks + 2) % pieces == 0 and pieces > 1:
        each = (blocks + 2) // pieces
        return (each - 1,) + (each,) * (pieces - 2) + (each - 1,)
    return None


def predict(row: Row, adjust=None) -> TrainingPlan:
    """The model's plan of ``row`` on its preset's calibration (flash attention, FP8 products of its recipe);
    ``adjust``: a function of the preset's cluster giving the cluster to price on instead (an audit's what-if).

    Raises ``PaseError`` when the row cannot be evaluated (a sample pase does not have, a split it refuses).
    """
    if row.sample not in SAMPLES:
        raise PaseError(f"no sample {row.sample!r}")
    cluster = preset(row.cluster, row.gpus, calibrated=True)
    if adjust is not None:
        cluster = adjust(cluster)
    build, par = batch_builder(row.sample, seq=row.seq, **({"mtp": row.mtp} if row.mtp else {})), parallelism(row)
    options, cache = ConfigOptions(attention="flash", precision=row.precision), {}
    par = replace(par, stage_cuts=recipe_cuts(row, build, cluster, par, options, cache))
    return evaluate_training(build, cluster, par, options=options, cache=cache)


def recipe_cuts(row: Row, build, cluster, par: Parallelism, options, cache: dict) -> tuple[int, ...] | None:
    """The stage cuts ``row``'s recipe runs for configuration ``par`` of ``build``: its own layout (where it
    covers ``build``'s blocks: a model built without the recipe's prediction module has fewer), or as
    Megatron-Core splits the blocks without one (:func:`megatron_split`), or where neither applies
    ``pase.frameworks.MEGATRON``'s balanced whole-block cuts."""
    layout = block_layout([layer.name for layer in build(par.microbatch_size).layers])
    own = row.layout if row.layout is not None and sum(row.layout) == layout.blocks else None
    counts = own or megatron_split(layout.blocks, row.pp * row.vp)
    return (framework_cuts(MEGATRON, build, cluster, par, options, cache) if counts is None
            else layout.cuts_of(counts))


def run() -> tuple[str, str, float, list[dict]]:
    """The per-row table, the summary lines, the seconds it took and the rows as
    ``pase/hardware/data/validation.json`` keeps them (:mod:`pase.hardware.accuracy`)."""
    start = time.perf_counter()
    records = []
    lines = ["| source | run | GPUs | TP PP CP VP EP | measured step (s) | model step (s) | error | memory per GPU "
             "(GB of) | model TFLOP/s per GPU |", "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    errors, missing, moe, dense, mx, later = [], [], [], [], [], []
    for row in ROWS:
        try:
            plan = predict(row)
        except PaseError as exc:
            missing.append(f"{row.label} ({exc})")
            continue
        error = plan.step_time_s / row.measured_step_s - 1
        records.append({"run": row.label, "source": row.source, "sample": row.sample, "cluster": row.cluster,
                        "gpus": row.gpus, "experts": row.ep > 1, "measured_step_s": round(row.measured_step_s, 6),
                        "model_step_s": round(plan.step_time_s, 6)})
        if row.in_section_3:
            errors.append(error)
            (moe if row.ep > 1 else dense).append(error)
        else:
            (mx if row.run_precision == "mxfp8" else later).append(error)
        cap = plan.memory_capacity_bytes or 0.0
        lines.append(
            f"| {row.source} | {row.label} | {row.gpus:,} | {row.tp} {row.pp} {row.cp} {row.vp} {row.ep} | "
            f"{row.measured_step_s:.3f} | {plan.step_time_s:.3f} | {error * 100:+.1f}% | "
            f"{plan.memory_per_device_bytes / 1e9:.1f} ({cap / 1e9:.0f}){'' if plan.fits_memory else ' over'} | "
            f"{plan.model_flops_per_device_per_s / 1e12:.0f} |")
    absolute = [abs(e) for e in errors]
    summary = [f"* The {len(errors)} rows of section 3: mean absolute error {sum(absolute) / max(len(absolute), 1) * 100:.1f}%, "
               f"largest {max(absolute, default=0.0) * 100:.1f}% (goals {GOALS[0] * 100:.0f}% and "
               f"{GOALS[1] * 100:.0f}%); {sum(e > 0 for e in errors)} slow, {sum(e < 0 for e in errors)} fast."]
    if dense:
        summary.append(f"* Of them the {len(dense)} dense rows: mean absolute error "
                       f"{sum(map(abs, dense)) / len(dense) * 100:.1f}%, largest {max(map(abs, dense)) * 100:.1f}%; "
                       f"{sum(e > 0 for e in dense)} slow, {sum(e < 0 for e in dense)} fast.")
    if moe:
        summary.append(f"* Of them the {len(moe)} mixture-of-experts rows: mean absolute error "
                       f"{sum(map(abs, moe)) / len(moe) * 100:.1f}%, largest {max(map(abs, moe)) * 100:.1f}%.")
    if mx:
        summary.append(f"* Beside them, the {len(mx)} B200 runs in MXFP8 (the table's parentheses): mean absolute "
                       f"error {sum(map(abs, mx)) / len(mx) * 100:.1f}%, largest {max(map(abs, mx)) * 100:.1f}%; "
                       f"{sum(e > 0 for e in mx)} slow, {sum(e < 0 for e in mx)} fast.")
    if later:
        summary.append(f"* Beside them, the {len(later)} GPT-OSS 120B runs of Megatron-Bridge 26.02 (H100, B200): mean "
                       f"absolute error {sum(map(abs, later)) / len(later) * 100:.1f}%, largest "
                       f"{max(map(abs, later)) * 100:.1f}%; {sum(e > 0 for e in later)} slow, "
                       f"{sum(e < 0 for e in later)} fast.")
    if missing:
        summary.append(f"* Not evaluated: {'; '.join(missing)}.")
    return "\n".join(lines), "\n".join(summary), time.perf_counter() - start, records


def write_records(records: list[dict]) -> None:
    """Keep the rows where ``pase`` reads them (:mod:`pase.hardware.accuracy`), with where they come from."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=VALIDATION.parents[3], capture_output=True,
                            text=True).stdout.strip()
    VALIDATION.write_text(json.dumps({
        "generated_by": f"python benchmarks/validate_today.py on {datetime.date.today().isoformat()} (at commit "
                        f"{commit or 'unknown'})",
        "source": "../shared/design/published-measurements.md, section 3: NeMo 24.07's and Megatron-Bridge 25.09's "
                  "published performance tables, each run's step from its tokens/s/GPU; predicted out of sample "
                  "(BENCHMARKS.md, \"Today's runs against the model\")",
        "rows": records}, indent=1) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true",
                        help="print the section instead of writing BENCHMARKS.md and pase/hardware/data/validation.json")
    args = parser.parse_args()
    table, summary, elapsed, records = run()
    if not args.no_write:
        write_records(records)
    text = "\n".join([
        SECTION, "",
        f"`python benchmarks/validate_today.py` on {datetime.date.today().isoformat()} ({elapsed:.0f} s); "
        f"{machine()}.", "",
        "Every row of section 3 of `../shared/design/published-measurements.md` but Nemotron-8B and -22B "
        "(no architecture given), the mixtures of experts of 3b included (expert parallelism as Megatron-Core lays "
        "it out, `pase.model.experts`), predicted by `pase evaluate`'s model on each preset's calibration, flash "
        "attention and FP8 products (how the rows ran and what is assumed: the script's docstring). No figure of "
        "the calibrations was fitted to these rows: they are out of sample. What each calibration saw: `dgx-h100` "
        "and `dgx-h200`, the kernel timings of one H200 alone (`pase/hardware/data/h200-kernels.json`: matrix "
        "products, FP8 products, flash attention, copies and normalisations; no training step), their tensor-core "
        "kernels taken at NVIDIA's stated 1,830 MHz tensor-core boost rather than the 1,980 MHz they were timed at "
        "(a published figure, not fitted); `dgx-b200`, published specifications with the H200's fractions carried "
        "over; the attention kernels' head-shape rates, NVIDIA's published cuDNN attention timings alone (an H200's "
        "for `dgx-h100` and `dgx-h200`, a GB200's for `dgx-b200`; no training step); the links, NCCL's published "
        "bus bandwidths; the A100 fit (not used here), Korthikanti Table 5 and "
        "Megatron Table 1 only. FP8 casts as Transformer Engine runs them in each row's recipe (`pase.model.precision`: "
        "delayed scaling in 3a, current per-tensor scaling in 3b, `Row.precision`). Stage cuts "
        "between whole transformer blocks, as Megatron-Core stacks them. The model TFLOP/s column counts "
        "FLOPs as NVIDIA's tables do (a causal attention kernel's half of the square).", "",
        summary, "", table, "",
        "What changed since the run before (each from a published figure, a framework's source or a hand count "
        "checked against a measured kernel, `tests/test_step_costs.py`; none fitted to these rows): the H100, H200 "
        "and B200 tensor-core kernels at the 1,830 MHz clock NVIDIA states the 989 TFLOP/s peak at (132 SMs x "
        "4,096 FLOP a clock x 1.83 GHz) instead of the 1,980 MHz the kernels were timed at alone (about 8% more "
        "time in products and attention); Transformer Engine's FP8 casts as it runs them (each activation "
        "cast-transposed once however many fused products read it, a normalisation's output written in FP8 by the "
        "norm and only transposed for the backward, each output gradient cast-transposed, each weight cast once a "
        "step instead of every microbatch: Megatron-Core's `is_first_microbatch`), which takes time out where "
        "there are many microbatches (GPT3-175B on 128 GPUs: 64 a step); context parallelism's attention as "
        "Transformer Engine's ring runs it, one kernel a ring step with its share of the FLOPs (a CP 2 rank of "
        "Llama 3 8B: two kernels of a causal 4,096 sequence's, each as measured); the rotary embeddings of the "
        "Llama-family rows (Megatron-Core's fused RoPE: q and k read and written, forward and backward, about 1% "
        "of a step); and the stage cuts between whole blocks instead of anywhere, as Megatron-Core runs them. "
        "The dense rows now meet the goals, narrowly, and are still mostly fast: the small tensor-parallel-free "
        "models most (GPT3-5B -19%, Llama 3 8B with CP 2 -16%, Llama 2 7B and 13B -13% and -15%). Where a step's "
        "time goes in three of them, class by class against hand estimates from the kernel file: the next "
        "section. What is still missing and not priced, for want of a measurement or a hand count that settles "
        "it: the ring steps' output corrections, "
        "current scaling's 4-byte amax all-reduces under sequence parallelism, the optimizer's "
        "gradient-buffer zeroing and norm, and whatever sustained power and concurrent communication take from "
        "the kernels' speed in a real step. Memory: each preset holds what NVML reports (an 80 GB H100 81,559 "
        "MiB, 85.5 GB; Modal's published table), less pase's reserve (3.9 GB); with the FP8 weights' transposes "
        "counted (below), Nemotron-340B's last device is 0.08 GB over it, as it was not: the reserve is an "
        "estimate.",
        "",
        "The mixture-of-experts rows run as Megatron-Bridge's performance scripts set them (the script's docstring: "
        "their recomputation modules, the 1F1B all-to-all overlap of DeepSeek-V3 on H100), and every one fits its "
        "GPU in pase's memory model. Their expert blocks now price Megatron-Core's sort of the received rows by "
        "local expert and back (\"permutation 2\", `MoEAlltoAllTokenDispatcher.dispatch_postprocess` and "
        "`combine_preprocess`) and run each local expert's product as a kernel of its own, as Transformer Engine's "
        "grouped linear layer launches them, with no concurrency credited between its streams (published timings "
        "of such loops show none: `pase.model.experts.GROUPED_GEMM_EVIDENCE`); where a step's time goes, class by "
        "class against hand estimates: `benchmarks/audit_moe.py`. The H100 DeepSeek-V3 run dispatches with DeepEP, "
        "as its recipe sets it, and pase now prices DeepEP as it sends: a token crosses the network once for each "
        "other node holding some of its experts and is forwarded there over NVLink, and DeepSeek-V3's node-limited "
        "routing (4 of 8 groups, one a node at EP 64) takes it to 3.5 other nodes on average instead of 7 of its 8 "
        "copies (`pase.model.experts.deepep_fanout`). That halves the row's network bytes and takes its prediction "
        "from 9.6% slow to 24% fast: the priced all-to-all had covered a shortfall in its computation, which the "
        "B200 DeepSeek-V3 row (no DeepEP, one node's expert group) shows as well. Its 1F1B all-to-all overlap is "
        "now scheduled as Megatron-Core merges one microbatch's forward with another's backward, each exchange "
        "hidden behind a part of the other's whole layer rather than behind the experts' own compute alone, with "
        "DeepEP's 20 SMs taken from the computation beside it and the pipeline's warm-up and cool-down run "
        "unmerged, as Megatron-Core schedules them (`pase.model.expert_overlap`): 24% fast becomes 32% fast, the "
        "exposed exchanges falling from 3.9 s to 1.9 s a step. DeepSeek's own published profile "
        "of a DeepSeek-V3 layer (its framework, H800) takes 7% longer than pase prices the same layer's kernels "
        "on the SMs DeepEP leaves them (`benchmarks/audit_deepseek_profile.py`), about the dense rows' shortfall; "
        "the Megatron-Core run's further 20% is in what its step adds, unmeasured here. What is still assumed and "
        "not measured here: DeepEP's network share at the calibration's rate (47 GB/s; DeepEP's published 51 GB/s "
        "at EP 64 on H800 is 9% faster), "
        "the products' time under about 30 GFLOP (a kernel alone takes 22-31 us there whatever its size, the "
        "host's issue included: `benchmarks/audit_launch.py`; on the B200 that floor is carried over), the B200 "
        "Qwen3-30B-A3B run's CUDA graphs (its recipe's `cuda_graphs: true`). The B200 DeepSeek-V3 run's shared "
        "experts now run beside its all-to-all, as its recipe sets them (`moe_shared_expert_overlap`): 27.5% fast "
        "becomes 29.8%. The DeepSeek-V3 rows carry the recipe's multi-token-prediction module and pipeline "
        "layouts (the script's docstring). None of these was fitted to the rows.",
        "",
        "Since the run before: DeepSeek-V3's attention kernel counts its context product at the 128-wide value "
        "heads (it had been counted at the 192-wide score heads', 20% more FLOPs; pase's model FLOPs per token of "
        "every 3b row now match NVIDIA's model TFLOP/s column within 1%, `tests/test_today.py`), and every fused "
        "attention kernel runs at its head shape's published rate (`pase.hardware.attention_kernels`: NVIDIA's "
        "cuDNN timings of 192/128-wide heads and of windowed 64-wide ones beside 128-wide ones, on an H200 for the H100 and H200, on a "
        "GB200 for the B200; `benchmarks/audit_attention.py`). On the H100 the two nearly cancel, MLA's backward "
        "running at 0.75 of the 128-wide rate (DeepSeek-V3 -30.0% becomes -29.2%); on the B200, at 0.8-0.87 "
        "(-30.0% becomes -29.3%; in MXFP8 -34.8% becomes -34.2%). The other rows' heads are 128 wide: unchanged.",
        "",
        "Before that: the 3b rows are priced in the FP8 recipe they ran, current per-tensor scaling "
        "(the scripts of that release run the mixtures of experts in no other per-tensor recipe, and the 25.11 table "
        "names the same dense runs FP8-CS; the script's docstring), where they had been priced in delayed scaling: "
        "each cast reads its BF16 tensor once more for its amax and launches two more kernels, and a normalisation "
        "no longer writes its product's input in FP8 (Transformer Engine's `Float8CurrentScalingQuantizer` and "
        "`FUSED_NORM_AMAX_FP8`; hand counts in `tests/test_step_costs.py`). And the experts' FP8 weights are cast "
        "once a step, as the dense products' are (Megatron-Core passes `is_first_microbatch` to Transformer "
        "Engine's grouped linear layer too), where every microbatch had cast them again on top of the step's cast; "
        "and their inputs and output gradients are cast-transposed, as the grouped linear layer quantises them "
        "row-wise and column-wise for the weight gradient, where pase had cast them one way (3 bytes an element, "
        "not 4). "
        "The weights' fix alone, in delayed scaling: DeepSeek-V3 -31.9% becomes -32.6%, on B200 -29.8% becomes "
        "-32.1%, Qwen3-30B-A3B -18.1% becomes -18.7% (B200 +26.6% becomes +25.7%), Qwen3-235B-A22B -16.1% becomes "
        "-16.6% (B200 -15.8% becomes -17.0%); current scaling then adds 2-4% to every 3b row, and the experts' "
        "cast-transposes 0.4-0.8% to the MoE rows (DeepSeek-V3 -30.4% becomes -30.0%, Qwen3-30B-A3B -15.9% "
        "becomes -15.1%, on B200 +29.1% becomes +29.8%). Memory now holds each FP8 weight's transpose beside it, as "
        "Transformer Engine caches both over a step (its weight workspace, quantised both ways while training: "
        "v1.8's `get_fp8_workspace(..., with_transpose=True)`, 2.x's `quantize_weight`), 2 bytes a parameter where "
        "pase had counted 1 (MXFP8: 2 and its block scales); no step changes. "
        "The 3a rows are unchanged.",
        "",
        "Beside section 3, the same table's B200 runs in MXFP8 (its parentheses, `MXFP8_RUNS`; pase's `--precision "
        "mxfp8`: one quantisation kernel a tensor writing both copies and their 32-element block scales, no amax "
        "pass, the norm's output quantised after it, and the products on the same FP8 curve, carried over from the "
        "H200 as for the B200's other FP8). pase prices MXFP8 1-3% faster than FP8-CS, its casts being lighter; the "
        "runs measured it 2-7% slower in three of the four (Qwen3-235B-A22B 4% faster), so the 4 MXFP8 rows are "
        "further off than their FP8-CS twins. What MXFP8 costs on Blackwell beyond its bytes (the block scales "
        "applied inside the product, the quantisation kernels' own rate) is not measured here: no B200 kernel is.",
        "",
        "Beside them too, GPT-OSS 120B, the mixture of experts of issue 27 that section 3 lacks, as Megatron-Bridge "
        "26.02 ran it on 64 H100 and 64 B200 GPUs (`LATER_RUNS`; BF16, its recipe's recomputation and all-to-all "
        "dispatcher, no CUDA graphs, Megatron-Core's even split of its 36 blocks over 4 stages, the 201,088-word "
        "output layer on the last). Both are fast: the H100 run by 35% (the same configuration measured 5,810 to "
        "5,993 tokens/s/GPU in four releases, 26.02 to 26.04.01: not one release's accident), the B200 run by 24%. "
        "NVIDIA's own account of GPT-OSS's lost time is in software pase does not price: its fused, sync-free MoE "
        "kernels of June 2026 gave GPT-OSS pre-training 93% end to end (NVIDIA Technical Blog, \"Boosting MoE "
        "Training Throughput with Advanced Fusion Kernels\", 2026-06-15): the host's synchronisation and unfused "
        "kernels, none of which pase prices apart from each kernel's own time alone.",
        "",
    ])
    publish(text, args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

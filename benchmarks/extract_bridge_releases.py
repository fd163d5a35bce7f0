"""Megatron-Bridge's published pre-training throughputs, every release: what pase shows beside a plan.

NVIDIA publishes, with each NeMo container, the tokens/s/GPU its Megatron-Bridge performance recipes reach
(``docs/performance-summary.md`` for the newest release, ``docs/performance-summary-archive.md`` for the ones
before). Section 3b of published-measurements.md is the 25.09 table; the releases after it ran many of the same
configurations on the same systems again. This script reads both documents of a Megatron-Bridge checkout and writes
every pre-training row as one run each: the table's parentheses (another quantisation, or in 25.09's GB200 table
another configuration) become a run of their own.

What each run keeps: the release, the system, the model as the table names it and the pase sample it is (None
where pase has none), its variant (tokendrop, dropless, w/ MTP, w/o MTP: where the table names none, a mixture of
experts ran dropless, as each table's note says), GPUs, precision, GBS, MBS, sequence, FSDP, TP, PP, CP, VP, EP
and tokens/s/GPU. Precision as pase names it: the 25.09 table names none, its runs being FP8 with current
scaling and its parentheses MXFP8 on Blackwell and 128-element blocks on the H100 (the table's note; the
mixtures of experts' H100 blocks are DeepSeek-V3's 128 x 128 weights and 1 x 128 activations); the later
tables' "FP8" on the H100 is current scaling (the recipes of those releases define no other FP8 for the H100:
``scripts/performance/configs/*/*_workload_base_configs.py``).

Usage: ``python benchmarks/extract_bridge_releases.py REPO [OUT]`` (``REPO``: a Megatron-Bridge git directory;
``OUT``: ``pase/hardware/data/megatron-bridge-runs.json``, which ``pase.hardware.published_runs`` reads). Reads
the documents at the repository's ``HEAD``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "pase" / "hardware" / "data" / "megatron-bridge-runs.json"
DOCS = ("docs/performance-summary.md", "docs/performance-summary-archive.md")
SAMPLES = {"LLAMA3_8B": "llama3-8b", "LLAMA3_70B": "llama3-70b", "LLAMA3.1_405B": "llama3-405b",
           "DeepSeekV3": "deepseek-v3", "Qwen3_30B_a3B": "qwen3-30b-a3b", "Qwen3_235B_a22B": "qwen3-235b-a22b",
           "GPT OSS 120B": "gpt-oss-120b"}
# The mixtures of experts the tables list: dropless where a table names no variant (its note).
MOE = ("DeepSeekV3", "Qwen3_30B_a3B", "Qwen3_235B_a22B", "GPT OSS 120B", "Kimi_K2", "Nemotron_3_Super",
       "Nemotron_3_Nano", "Nemotron_3_Ultra", "Nemotron_3_5_Lightning", "DeepSeekV4 Flash", "Qwen3_Next_80B_a3B")
PRECISIONS = {"FP8": "fp8-cs", "FP8-CS": "fp8-cs", "MXFP8": "mxfp8", "FP8-MX": "mxfp8", "BF16": "bf16",
              "NVFP4": "nvfp4"}
COLUMNS = {"#-GPUs": "gpus", "Precision": "precision", "GBS": "gbs", "MBS": "mbs", "Sequence Length": "seq",
           "FSDP": "fsdp", "TP": "tp", "PP": "pp", "CP": "cp", "VP": "vp", "EP": "ep",
           "Tokens / sec / GPU": "tokens_per_gpu_s", "Model": "model", "System": "system"}
INTEGERS = ("gpus", "gbs", "mbs", "seq", "fsdp", "tp", "pp", "cp", "vp", "ep")


def split_cell(cell: str) -> tuple[str, str]:
    """A table cell's value and its parenthesised alternative (the value itself where there is none)."""
    cell = re.sub(r"\[\^[^\]]*\]", "", cell).strip()
    match = re.fullmatch(r"(.*?)\s*\(([^()]*)\)\s*", cell)
    if match and match.group(1):
        return match.group(1).strip(), match.group(2).strip()
    return cell, cell


def model_name(cell: str) -> tuple[str, str]:
    """The model as the table names it and its variant ("tokendrop", "w/ MTP"...; "" where none)."""
    match = re.fullmatch(r"(.*?)\s*\((tokendrop|dropless|w/ MTP|w/o MTP)\)", cell.strip())
    return (match.group(1), match.group(2)) if match else (cell.strip(), "")


def runs(text: str, document: str) -> list[dict]:
    """Every pre-training run of one performance document (the module docstring)."""
    out, release, section, heading, header = [], None, "", {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            found = re.match(r"## (\S+) NeMo Container", line)
            release, section, heading, header = (found.group(1) if found else None), "", {}, None
        elif line.startswith("### "):
            section, header = line[4:].strip(), None
        elif line.startswith("#### "):
            key, _, value = line[5:].partition(":")
            heading, header = {key.strip().lower(): value.strip()}, None
        elif line.startswith("|") and release:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = [COLUMNS.get(c, c) for c in cells]
                continue
            if set(line) <= set("|-: ") or (section and "Pre-Training" not in section):
                continue
            out.extend(_row_runs(dict(zip(header, cells)), heading, release, document))
    return out


def _row_runs(cells: dict, heading: dict, release: str, document: str) -> list[dict]:
    """The run of one table row and, where its cells hold parentheses, the alternative run beside it."""
    system = cells.get("system", heading.get("system", ""))
    name, variant = model_name(cells.get("model", heading.get("model", "")))
    base = {"release": release, "document": document, "system": system.removeprefix("DGX-"), "model": name,
            "sample": SAMPLES.get(name), "variant": variant or ("dropless" if name in MOE else "")}
    fields = [k for k in cells if k in INTEGERS + ("precision", "tokens_per_gpu_s")]
    main, alternative = dict(base), dict(base)
    for key in fields:
        main[key], alternative[key] = split_cell(cells[key])
    parenthesised = any(main[k] != alternative[k] for k in fields)
    if "precision" not in cells:  # 25.09: current scaling, its parentheses another quantisation
        main["precision"] = "FP8-CS"
        alternative["precision"] = "FP8-blockwise" if system.endswith("H100") else "MXFP8"
    result = []
    for run in (main, alternative) if parenthesised else (main,):
        run["precision"] = PRECISIONS.get(run["precision"], run["precision"].lower())
        for key in INTEGERS:
            value = run.get(key, "0" if key == "fsdp" else "1")
            run[key] = 1 if value in ("n/a", "") else int(value.replace(",", ""))
        run["tokens_per_gpu_s"] = float(run["tokens_per_gpu_s"].replace(",", ""))
        result.append(run)
    return result


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__.splitlines()[-3], file=sys.stderr)
        return 2
    repo, out = sys.argv[1], Path(sys.argv[2]) if len(sys.argv) > 2 else OUT
    commit = subprocess.run(["git", "--git-dir", repo, "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    found = []
    for document in DOCS:
        text = subprocess.run(["git", "--git-dir", repo, "show", f"HEAD:{document}"], capture_output=True,
                              text=True, check=True).stdout
        found += runs(text, document)
    unique = {json.dumps({k: v for k, v in r.items() if k != "document"}, sort_keys=True): r for r in found}
    out.write_text(json.dumps({
        "what": "Megatron-Bridge's published pre-training throughputs (tokens/s/GPU), one entry a run, every NeMo "
                "container release its performance documents list; extracted by "
                "benchmarks/extract_bridge_releases.py (its docstring: how parentheses and precisions are read).",
        "source": f"github.com/NVIDIA-NeMo/Megatron-Bridge, {' and '.join(DOCS)} at commit {commit}",
        "runs": list(unique.values())}, indent=1) + "\n")
    print(f"{len(unique)} runs of {len({r['release'] for r in unique.values()})} releases -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

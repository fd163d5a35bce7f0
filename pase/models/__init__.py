"""Sample graphs: the paper's benchmark networks and more, built by code.

Every builder returns a validated :class:`~pase.ir.graph.Graph` and takes the
batch size and model sizes as keyword parameters; its docstring states the
architecture and the parameter count. :data:`SAMPLES` maps each sample name
to its builder; :func:`sample` builds one by name.

Name, network, vertices and parameters with the default sizes:

* ``alexnet``: AlexNet (torchvision), batch 128; 13 vertices, 61,100,840.
* ``inception3``: InceptionV3 without the auxiliary head, batch 128; 219, 23,834,568.
* ``resnet101``: ResNet-101 (v1.5), batch 128; 245, 44,549,160.
* ``rnnlm``: 2-layer LSTM language model, vocabulary 100k, hidden 2048,
  sequence 256, batch 64; 4, 476,825,248.
* ``transformer``: Transformer base, 6 + 6 layers, model 512, 8 heads,
  feed-forward 2048, vocabulary 50k, sequence 256, batch 64; 214, 120,938,496.
* ``transformer_large``: the same with model 1024, 16 heads, feed-forward
  4096; 214, 329,957,376.
* ``densenet121``: DenseNet-121, batch 128; 306, 7,978,856.
* ``gpt``: GPT-2-medium-like decoder, 24 layers, model 1024, 16 heads,
  sequence 1024, vocabulary 50257, batch 32; 318, 406,286,336.

Megatron-LM's GPT runs (:mod:`pase.models.megatron`: dropout vertices, GeLU
unfused, the vocabulary projection tied to the token embedding), sequence
2048, vocabulary 51,200, the published global batch; name: heads, hidden,
layers, batch; vertices, parameters:

* ``megatron-1.7b``: 24, 2304, 24, 512; 415, 1,652,230,656.
* ``megatron-3.6b``: 32, 3072, 30, 512; 517, 3,562,168,320.
* ``megatron-7.5b``: 32, 4096, 36, 512; 619, 7,467,786,240.
* ``megatron-18b``: 48, 6144, 40, 1024; 687, 18,449,756,160.
* ``megatron-39b``: 64, 8192, 48, 1536; 823, 39,096,041,472.
* ``megatron-76b``: 80, 10240, 60, 1792; 1027, 76,050,739,200.
* ``megatron-146b``: 96, 12288, 80, 2304; 1367, 145,622,261,760.
* ``megatron-310b``: 128, 16384, 96, 2160; 1639, 310,130,540,544.
* ``megatron-530b``: 128, 20480, 105, 2520; 1792, 529,600,819,200.
* ``megatron-1t``: 160, 25600, 128, 3072; 2183, 1,008,038,758,400.
* ``megatron-22b``: Korthikanti et al.'s 22B, 64 heads, hidden 6144, FFN
  24576, 48 layers, batch 4; 823, 22,074,273,792.
* ``gpt3-175b``: GPT-3 175B, 96 heads, hidden 12288, 96 layers, batch
  1536; 1639, 174,615,846,912.
* ``gpt3-5b``, ``gpt3-20b``: NeMo's GPT-3 configs (NeMo-Framework-Launcher
  ``conf/training/gpt3/5b.yaml``, ``20b.yaml``), 32, 4096, 24 and 48, 6144,
  44, batch 2048, vocabulary GPT-2's padded to 50,304 and 50,432; 415,
  5,047,558,144 and 755, 20,257,296,384.

These take ``seq=`` (default 2,048; the position table as long).

Meta's Llama 3 (:mod:`pase.models.llama`: RMSNorm, grouped-query attention
with 8 key/value heads, SwiGLU, no biases, no dropout, untied output
projection; RoPE left out), vocabulary 128,256, sequence 8,192, batch 2048
(the published 16M-token batch); name: layers, hidden, heads, FFN;
vertices, parameters:

* ``llama3-8b``: 32, 4096, 32, 14336; 484, 8,030,261,248.
* ``llama3-70b``: 80, 8192, 64, 28672; 1204, 70,553,706,496.
* ``llama3-405b``: 126, 16384, 128, 53248; 1894, 405,853,388,800.

The same builder at other published sizes, sequence 4,096 (every Llama-style
sample takes ``seq=``): Llama 2 (vocabulary 32,000, batch 1024, the 4M-token
batch; 7B and 13B with as many key/value heads as heads), name: layers,
hidden, heads, key/value heads, FFN; vertices, parameters:

* ``llama2-7b``: 32, 4096, 32, 32, 11008; 484, 6,738,415,616.
* ``llama2-13b``: 40, 5120, 40, 40, 13824; 604, 13,015,864,320.
* ``llama2-70b``: 80, 8192, 64, 8, 28672; 1204, 68,976,648,192.
* ``nemotron4-340b``: Nemotron-4 340B (LayerNorm, a squared-ReLU
  feed-forward network, vocabulary 256,000, batch 2304), 96, 18432, 96, 8,
  73728; 1348, 341,029,195,776.

Mixtures of experts (:mod:`pase.models.moe`: Llama-style attention, top-k
routed SwiGLU experts with an expert dimension ``x``), sequence 4,096, batch
16; name: layers, hidden, experts, top-k, expert FFN; vertices, parameters:

* ``mixtral-8x7b``: 32, 4096, 8, 2, 14336; 452, 46,702,792,704.
* ``deepseek-moe-16b``: 28, 2048, 64 + 2 shared, 6, 1408 (first layer dense,
  FFN 10944); 505, 16,375,728,128.

:mod:`pase.models.teaching` holds the small graphs the app's Learn page draws
(one GEMM, a branchy 8-layer graph); they are not samples.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

from pase.errors import GraphError, did_you_mean
from pase.ir.graph import Graph
from pase.models.cnn import alexnet, densenet121, inception3, resnet101
from pase.models.sequence import gpt, rnnlm, transformer, transformer_large
from pase.models.llama import LLAMA_SAMPLES, llama
from pase.models.megatron import MEGATRON_SAMPLES, megatron_gpt
from pase.models.moe import FRONTIER_MOE, MOE_SAMPLES, moe_decoder
from pase.ops.registry import reusing_layers

__all__ = [
    "SAMPLES",
    "sample",
    "batch_builder",
    "alexnet",
    "inception3",
    "resnet101",
    "rnnlm",
    "transformer",
    "transformer_large",
    "densenet121",
    "gpt",
    "megatron_gpt",
    "llama",
    "moe_decoder",
    "LANGUAGE_MODELS",
]

SAMPLES: dict[str, Callable[..., Graph]] = {
    "alexnet": alexnet,
    "inception3": inception3,
    "resnet101": resnet101,
    "rnnlm": rnnlm,
    "transformer": transformer,
    "transformer_large": transformer_large,
    "densenet121": densenet121,
    "gpt": gpt,
    **MEGATRON_SAMPLES,
    **LLAMA_SAMPLES,
    **MOE_SAMPLES,
}

# Samples planned with pipeline stages, microbatches, ZeRO and recomputation by default
# (``pase solve --search auto``): the large language models, Megatron-LM's and NeMo's GPTs and the Llama-style
# decoders. Not the mixtures of experts: the 3-D search's Megatron rule never splits experts (pase.models.moe).
LANGUAGE_MODELS: tuple[str, ...] = (*MEGATRON_SAMPLES, *LLAMA_SAMPLES, *FRONTIER_MOE)


def batch_builder(name: str, **params) -> Callable[[int], Graph]:
    """``build(batch)``: sample ``name`` with ``params`` at that batch size (picklable, for worker processes).

    >>> batch_builder("alexnet")(16).layer("fc6").size_of["b"]
    16
    """
    return partial(_sample_at_batch, name, tuple(params.items()))


def _sample_at_batch(name: str, params: tuple, batch: int) -> Graph:
    return sample(name, **dict(params), batch=batch)


def sample(name: str, **params) -> Graph:
    """Build the sample graph ``name`` with the builder's keyword ``params`` (``batch=32``...).

    Raises
    ------
    GraphError
        ``name`` is not a sample (the message lists the known ones), or a
        parameter is unknown or invalid.

    Examples
    --------
    >>> g = sample("alexnet", batch=64)
    >>> g.layer("fc6").size_of["b"]
    64
    """
    try:
        builder = SAMPLES[name]
    except (KeyError, TypeError):
        hint = did_you_mean(name, SAMPLES)
        raise GraphError(f"unknown sample graph {name!r}" + (f" ({hint})" if hint else "")
                         + f"; known samples: {', '.join(SAMPLES)}") from None
    try:
        with reusing_layers():  # repeated blocks built once
            return builder(**params)
    except TypeError as exc:
        raise GraphError(f"sample {name!r}: {exc}") from None

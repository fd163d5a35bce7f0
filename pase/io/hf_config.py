"""Graphs from Hugging Face ``config.json`` files: the architecture from its sizes, no weights, no network.

:func:`from_hf_config` reads a model's ``config.json`` (a path, its bytes or
the parsed dict) and builds the training graph of the architecture it
names with pase's own builders, so the graph has the architecture's exact
parameter count:

* ``llama``, ``mistral``, ``qwen2``: :func:`pase.models.llama.llama`
  (grouped-query attention, SwiGLU, RMSNorm), with the family's biases
  (Qwen2's on q, k and v; Llama's ``attention_bias`` and ``mlp_bias``), an
  explicit ``head_dim`` and ``tie_word_embeddings``;
* ``gpt2``: :func:`pase.models.megatron.megatron_gpt` (GPT-2's blocks and
  dropouts, the projection tied to the token table, ``n_positions`` rows of
  learned positions);
* ``gpt_neox``: :func:`pase.models.sequence.gpt` with rotary positions and
  ``use_parallel_residual``;
* ``bert``: :func:`pase.models.sequence.bert`, the masked-LM pretraining
  network (``BertForMaskedLM``);
* ``mixtral``: :func:`pase.models.moe.moe_decoder`, Mistral's attention with
  every feed-forward block a mixture of ``num_local_experts`` SwiGLU experts
  of width ``intermediate_size``, ``num_experts_per_tok`` of them per token
  (capacity factor 1);
* ``deepseek`` (DeepSeekMoE, ``DeepseekForCausalLM``, a remote-code model
  transformers has no class for): :func:`pase.models.moe.moe_decoder` with
  ``n_routed_experts`` experts of width ``moe_intermediate_size``, the
  ``n_shared_experts`` shared experts as one dense network, and the first
  ``first_k_dense_replace`` blocks dense (``intermediate_size``); attention
  biases and ``moe_layer_freq`` other than 1 are refused.

``pase solve config.json`` (``--search auto``) plans every config in 3-D, a
mixture of experts (:func:`is_moe_config`) with its experts split by the 3-D
search's expert parallelism (:mod:`pase.model.experts`); ``--search layers``
splits them per layer instead.

The graph is the model the ``architectures`` entry trains: a causal language
model (``LlamaForCausalLM``, ``GPT2LMHeadModel``...) or BERT's masked LM; a
config listing another head (sequence classification...) is refused, its
parameters being others. Keys left out of a config take Hugging Face's
defaults for the family (``num_key_value_heads``, ``tie_word_embeddings``...),
except the sizes, which must be stated. A sliding window (Mistral's
``sliding_window``; Qwen2's where ``use_sliding_window`` is true) is read into
the attention's softmax, which a fused kernel computes within
(:mod:`pase.model.attention`). Rotary scaling and dropout rates change neither
parameters nor FLOPs, and are not read; nor are the routers' options (jitter
noise, auxiliary loss, top-k normalisation, scoring function).

:data:`FAMILIES` is the dispatch table, keyed by ``model_type``.
:func:`hf_batch_builder` is the ``build(batch)`` the 3-D search rebuilds a
model with. ``pase solve config.json`` (and ``show``, ``evaluate``,
``sweep``) reads a ``.json`` file through here when :func:`is_hf_config`
says it is one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Mapping

from pase.errors import FormatError, GraphError, PaseError
from pase.io.files import read_limited
from pase.ir.graph import Graph
from pase.limits import MAX_DIM, MAX_FILE_BYTES, MAX_LAYERS
from pase.models.llama import llama
from pase.models.megatron import megatron_gpt
from pase.models.moe import MLA, moe_decoder
from pase.models.sequence import bert, gpt
from pase.ops.registry import reusing_layers

__all__ = ["from_hf_config", "hf_batch_builder", "is_hf_config", "read_hf_config", "FAMILIES", "Family", "ConfigKeys",
           "DEFAULT_BATCH", "MAX_DEFAULT_SEQ"]

# 512 sequences: GPT-2's and Megatron-LM's global batch (BERT's 256 at 512 tokens, Llama 3's 2048 at 8192
# bracket it); a global batch a planner splits over hundreds of replicas.
DEFAULT_BATCH = 512
# The default sequence is the config's position count, at most Llama 3's pretraining length: the 128k
# contexts of long-context configs are reached by fine-tuning, and a square attention of 128k positions
# would dominate every plan.
MAX_DEFAULT_SEQ = 8192

_REQUIRED = object()


class ConfigKeys:
    """The keys of one config, read with the family's defaults; errors name the file, key and fix.

    A :class:`Family`'s builder reads its sizes through :meth:`size`,
    :meth:`flag` and :meth:`refuse`, which raise :class:`FormatError`.
    """

    def __init__(self, data: Mapping[str, Any], where: str, model_type: str):
        self.data, self.where, self.model_type = data, where, model_type

    def size(self, key: str, default: Any = _REQUIRED, *, limit: int = MAX_DIM, least: int = 1) -> int:
        """An integer ``key`` from ``least`` (1: positive) to ``limit``; ``default`` when absent (or null) and
        one is given.

        ``limit`` defaults to pase's largest dimension; a layer count is
        bounded by :data:`pase.limits.MAX_LAYERS` before a graph is built.
        """
        value = self.data.get(key)
        if value is None:
            if default is _REQUIRED:
                raise FormatError(f"{self.where}: the {self.model_type} config has no {key!r}; add it as in the "
                                  "model's published config.json")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= limit:
            kind = "a positive integer" if least == 1 else f"an integer of at least {least}"
            raise FormatError(f"{self.where}: {key!r} must be {kind} of at most {limit:,}, got {_short(value)}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise FormatError(f"{self.where}: {key!r} must be true or false, got {_short(value)}")
        return value

    def refuse(self, key: str, supported: Any, what: str) -> None:
        """FormatError unless ``key`` is absent or ``supported``: a variant whose parameters pase does not build."""
        value = self.data.get(key, supported)
        if value != supported:
            raise FormatError(f"{self.where}: {key} {_short(value)} ({what}) is not supported; pase builds "
                              f"{self.model_type} with {key} {supported!r}")


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _divides(part: int, part_key: str, whole: int, whole_key: str, fix: str) -> None:
    """GraphError unless ``part`` divides ``whole`` (the caller prefixes the file's name)."""
    if whole % part:
        raise GraphError(f"{part_key} {part} does not divide {whole_key} {whole}; {fix}")


def _attention(keys: ConfigKeys, kv_default: int | None) -> dict[str, Any]:
    """The grouped-query attention sizes of a Llama-style config, checked: ``hidden``, ``heads``, ``kv_heads``,
    ``head_dim`` (None: ``hidden / heads``), the keywords of :func:`llama` and :func:`moe_decoder`."""
    hidden, heads = keys.size("hidden_size"), keys.size("num_attention_heads")
    # Hugging Face takes a missing (or null) key/value head count as one per query head, except where the
    # family's class default is a number (Mistral's 8, Qwen2's 32).
    kv = keys.size("num_key_value_heads", heads if kv_default is None else kv_default)
    head_dim = keys.size("head_dim", None)
    if head_dim is None:
        _divides(heads, "num_attention_heads", hidden, "hidden_size",
                 "choose a head count that divides the hidden size, or give head_dim")
    _divides(kv, "num_key_value_heads", heads, "num_attention_heads",
             "each key/value head serves a whole group of query heads; choose a divisor of num_attention_heads")
    return dict(hidden=hidden, heads=heads, kv_heads=kv, head_dim=head_dim)


def _llama_family(keys: ConfigKeys, name: str, batch: int, seq: int, *, kv_default: int | None,
                  qkv_bias: bool | None) -> Graph:
    """Llama, Mistral, Qwen2: ``qkv_bias`` None reads Llama's ``attention_bias``/``mlp_bias`` keys."""
    attention = _attention(keys, kv_default)
    if qkv_bias is None:
        attention_bias = keys.flag("attention_bias", False)
        biases = dict(qkv_bias=attention_bias, out_bias=attention_bias, mlp_bias=keys.flag("mlp_bias", False))
    else:
        biases = dict(qkv_bias=qkv_bias)
    windowed = keys.model_type == "mistral" or keys.flag("use_sliding_window", False)
    window = keys.size("sliding_window", 0, least=0) if windowed else 0
    return llama(name, layers=keys.size("num_hidden_layers", limit=MAX_LAYERS), ffn=keys.size("intermediate_size"),
                 vocab=keys.size("vocab_size"), batch=batch, seq=seq, tied=keys.flag("tie_word_embeddings", False),
                 window=window, **attention, **biases)


def _gpt2(keys: ConfigKeys, name: str, batch: int, seq: int) -> Graph:
    hidden, heads = keys.size("n_embd"), keys.size("n_head")
    _divides(heads, "n_head", hidden, "n_embd", "choose a head count that divides the width")
    keys.refuse("add_cross_attention", False, "cross-attention blocks of an encoder-decoder")
    return megatron_gpt(name, keys.size("n_layer", limit=MAX_LAYERS), hidden, heads, batch=batch, seq=seq,
                        vocab=keys.size("vocab_size"), ffn=keys.size("n_inner", 4 * hidden),
                        positions=keys.size("n_positions", 1024), tied=keys.flag("tie_word_embeddings", True))


def _gpt_neox(keys: ConfigKeys, name: str, batch: int, seq: int) -> Graph:
    hidden, heads = keys.size("hidden_size"), keys.size("num_attention_heads")
    _divides(heads, "num_attention_heads", hidden, "hidden_size",
             "choose a head count that divides the hidden size")
    return gpt(batch, seq, hidden, keys.size("num_hidden_layers", limit=MAX_LAYERS), heads,
               keys.size("vocab_size"), keys.size("intermediate_size"), name=name, rotary=True,
               parallel_residual=keys.flag("use_parallel_residual", True),
               attention_bias=keys.flag("attention_bias", True), tied=keys.flag("tie_word_embeddings", False))


def _bert(keys: ConfigKeys, name: str, batch: int, seq: int) -> Graph:
    hidden, heads = keys.size("hidden_size"), keys.size("num_attention_heads")
    _divides(heads, "num_attention_heads", hidden, "hidden_size",
             "choose a head count that divides the hidden size")
    keys.refuse("position_embedding_type", "absolute", "relative position embeddings")
    keys.refuse("add_cross_attention", False, "cross-attention blocks of an encoder-decoder")
    return bert(name, keys.size("num_hidden_layers", limit=MAX_LAYERS), hidden, heads,
                keys.size("intermediate_size"), keys.size("vocab_size"), batch=batch, seq=seq,
                positions=keys.size("max_position_embeddings", 512),
                token_types=keys.size("type_vocab_size", 2), tied=keys.flag("tie_word_embeddings", True))


def _experts(keys: ConfigKeys, experts_key: str) -> tuple[int, int]:
    """The experts per layer and per token, checked: a token cannot choose more experts than there are."""
    experts, top_k = keys.size(experts_key), keys.size("num_experts_per_tok")
    if top_k > experts:
        raise GraphError(f"num_experts_per_tok {top_k} is more than {experts_key} {experts}; a token is routed "
                         "to that many distinct experts of its layer")
    return experts, top_k


def _mixtral(keys: ConfigKeys, name: str, batch: int, seq: int) -> Graph:
    """Mixtral: Mistral's attention (8 key/value heads by default), every block's SwiGLU a mixture of experts."""
    attention = _attention(keys, 8)
    experts, top_k = _experts(keys, "num_local_experts")
    return moe_decoder(name, layers=keys.size("num_hidden_layers", limit=MAX_LAYERS), experts=experts, top_k=top_k,
                       expert_ffn=keys.size("intermediate_size"), vocab=keys.size("vocab_size"), batch=batch,
                       seq=seq, tied=keys.flag("tie_word_embeddings", False), **attention)


def _deepseek(keys: ConfigKeys, name: str, batch: int, seq: int) -> Graph:
    """DeepSeekMoE (remote code, ``DeepseekForCausalLM``): fine-grained routed experts, shared experts and
    ``first_k_dense_replace`` leading dense blocks."""
    keys.refuse("attention_bias", False, "biases on the attention products")
    keys.refuse("moe_layer_freq", 1, "dense blocks between the expert blocks")
    attention = _attention(keys, None)
    layers = keys.size("num_hidden_layers", limit=MAX_LAYERS)
    experts, top_k = _experts(keys, "n_routed_experts")
    width = keys.size("moe_intermediate_size")
    dense = keys.size("first_k_dense_replace", 0, least=0, limit=layers)
    return moe_decoder(name, layers=layers, experts=experts, top_k=top_k, expert_ffn=width,
                       vocab=keys.size("vocab_size"), batch=batch, seq=seq,
                       shared_ffn=keys.size("n_shared_experts", 0, least=0) * width, dense_layers=dense,
                       dense_ffn=keys.size("intermediate_size") if dense else 0,
                       tied=keys.flag("tie_word_embeddings", False), **attention)


def _deepseek_v3(keys: ConfigKeys, name: str, batch: int, seq: int) -> Graph:
    """DeepSeek-V3 (``DeepseekV3ForCausalLM``): multi-head latent attention, routed and shared experts, leading
    dense blocks; the multi-token-prediction module (``num_nextn_predict_layers``) left out, as it is off in
    training benchmarks."""
    keys.refuse("attention_bias", False, "biases on the attention products")
    keys.refuse("moe_layer_freq", 1, "dense blocks between the expert blocks")
    layers = keys.size("num_hidden_layers", limit=MAX_LAYERS)
    experts, top_k = _experts(keys, "n_routed_experts")
    width = keys.size("moe_intermediate_size")
    dense = keys.size("first_k_dense_replace", 0, least=0, limit=layers)
    mla = MLA(q_rank=keys.size("q_lora_rank"), kv_rank=keys.size("kv_lora_rank"), nope=keys.size("qk_nope_head_dim"),
              rope=keys.size("qk_rope_head_dim"), v_dim=keys.size("v_head_dim"))
    heads = keys.size("num_attention_heads")
    return moe_decoder(name, layers=layers, hidden=keys.size("hidden_size"), heads=heads, kv_heads=heads,
                       head_dim=mla.v_dim, experts=experts, top_k=top_k, expert_ffn=width,
                       vocab=keys.size("vocab_size"), batch=batch, seq=seq,
                       shared_ffn=keys.size("n_shared_experts", 0, least=0) * width, dense_layers=dense,
                       dense_ffn=keys.size("intermediate_size") if dense else 0,
                       tied=keys.flag("tie_word_embeddings", False), mla=mla,
                       router_groups=keys.size("n_group", 1), router_group_topk=keys.size("topk_group", 1))


def _qwen3_moe(keys: ConfigKeys, name: str, batch: int, seq: int) -> Graph:
    """Qwen3-MoE (``Qwen3MoeForCausalLM``): grouped-query attention with QK-norm, every block a mixture of
    experts (no shared expert)."""
    keys.refuse("decoder_sparse_step", 1, "dense blocks between the expert blocks")
    keys.refuse("mlp_only_layers", [], "dense blocks among the expert blocks")
    keys.refuse("attention_bias", False, "biases on the attention products")
    experts, top_k = _experts(keys, "num_experts")
    return moe_decoder(name, layers=keys.size("num_hidden_layers", limit=MAX_LAYERS), experts=experts, top_k=top_k,
                       expert_ffn=keys.size("moe_intermediate_size"), vocab=keys.size("vocab_size"), batch=batch,
                       seq=seq, tied=keys.flag("tie_word_embeddings", False), qk_norm=True,
                       **_attention(keys, None))


def _gpt_oss(keys: ConfigKeys, name: str, batch: int, seq: int) -> Graph:
    """GPT-OSS (``GptOssForCausalLM``): grouped-query attention with biases, sliding-window and full layers as
    ``layer_types`` says (default: alternating, the first sliding), every block a mixture of experts. Its
    attention sinks and expert biases are left out (:data:`pase.models.moe.FRONTIER_MOE`)."""
    layers = keys.size("num_hidden_layers", limit=MAX_LAYERS)
    window = keys.size("sliding_window", 128)
    types = keys.data.get("layer_types") or ["sliding_attention", "full_attention"] * ((layers + 1) // 2)
    if not isinstance(types, list) or len(types) < layers or any(
            t not in ("sliding_attention", "full_attention") for t in types[:layers]):
        raise FormatError(f"{keys.where}: 'layer_types' must list 'sliding_attention' or 'full_attention' for each "
                          f"of the {layers} layers, got {_short(types)}")
    experts, top_k = _experts(keys, "num_local_experts")
    return moe_decoder(name, layers=layers, experts=experts, top_k=top_k, expert_ffn=keys.size("intermediate_size"),
                       vocab=keys.size("vocab_size"), batch=batch, seq=seq,
                       tied=keys.flag("tie_word_embeddings", False), attention_bias=keys.flag("attention_bias", True),
                       windows=tuple(window if t == "sliding_attention" else 0 for t in types[:layers]),
                       **_attention(keys, None))


@dataclass(frozen=True)
class Family:
    """How to build one ``model_type``: its builder, the classes it builds and its position count.

    ``build(keys, name, batch, seq)`` returns the graph; ``architectures``
    are the Hugging Face classes whose parameters the graph has (empty: the
    type is refused by its builder); ``positions`` is the config key of
    the longest sequence and its default, for the default ``seq``;
    ``experts`` marks a mixture of experts.
    """

    build: Callable[[ConfigKeys, str, int, int], Graph]
    architectures: tuple[str, ...]
    positions: tuple[str, int]
    experts: bool = False


FAMILIES: dict[str, Family] = {
    "llama": Family(partial(_llama_family, kv_default=None, qkv_bias=None), ("LlamaForCausalLM",),
                    ("max_position_embeddings", 2048)),
    "mistral": Family(partial(_llama_family, kv_default=8, qkv_bias=False), ("MistralForCausalLM",),
                      ("max_position_embeddings", 131072)),
    "qwen2": Family(partial(_llama_family, kv_default=32, qkv_bias=True), ("Qwen2ForCausalLM",),
                    ("max_position_embeddings", 32768)),
    "gpt2": Family(_gpt2, ("GPT2LMHeadModel",), ("n_positions", 1024)),
    "gpt_neox": Family(_gpt_neox, ("GPTNeoXForCausalLM",), ("max_position_embeddings", 2048)),
    "bert": Family(_bert, ("BertForMaskedLM",), ("max_position_embeddings", 512)),
    "mixtral": Family(_mixtral, ("MixtralForCausalLM",), ("max_position_embeddings", 131072), experts=True),
    "deepseek": Family(_deepseek, ("DeepseekForCausalLM",), ("max_position_embeddings", 2048), experts=True),
    "deepseek_v3": Family(_deepseek_v3, ("DeepseekV3ForCausalLM",), ("max_position_embeddings", 163840),
                          experts=True),
    "qwen3_moe": Family(_qwen3_moe, ("Qwen3MoeForCausalLM",), ("max_position_embeddings", 40960), experts=True),
    "gpt_oss": Family(_gpt_oss, ("GptOssForCausalLM",), ("max_position_embeddings", 131072), experts=True),
}
"""``model_type`` -> :class:`Family`: the families :func:`from_hf_config` reads."""

# A config without model_type is placed by its architectures entry.
_BY_ARCHITECTURE = {a: t for t, f in FAMILIES.items() for a in f.architectures}


def read_hf_config(source: str | Path | bytes | Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The config as a dict and a name for messages (the file's, or "config" for a dict or bytes).

    Raises
    ------
    FormatError
        The file is missing, larger than :data:`pase.limits.MAX_FILE_BYTES`,
        not JSON, or not a JSON object.
    """
    if isinstance(source, Mapping):
        return dict(source), "config"
    if isinstance(source, (bytes, bytearray, memoryview)):
        data, where = bytes(source), "config"
    elif isinstance(source, (str, Path)):
        data, where = read_limited(source, MAX_FILE_BYTES, what="Hugging Face config"), Path(source).name
    else:
        raise FormatError(f"a Hugging Face config must be a path, bytes or a dict, not {type(source).__name__}")
    try:
        config = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise FormatError(f"{where}: not valid JSON ({exc}); give the model's config.json") from None
    if not isinstance(config, dict):
        raise FormatError(f"{where}: a config.json holds one JSON object, not a {type(config).__name__}")
    return config, where


def is_hf_config(source: str | Path) -> bool:
    """Whether the ``.json`` file at ``source`` is a Hugging Face config: an object with ``model_type`` or
    ``architectures`` and no pase ``format`` key. False for anything unreadable (the caller's loader reports it)."""
    path = Path(source)
    if path.suffix.lower() != ".json" or not path.is_file():
        return False
    try:
        config, _ = read_hf_config(path)
    except PaseError:
        return False
    return ("model_type" in config or "architectures" in config) and "format" not in config


def is_moe_config(source: str | Path | bytes | Mapping[str, Any]) -> bool:
    """Whether :func:`is_hf_config` holds for ``source`` (a path, or a config's bytes or dict as they are) and
    its family is a mixture of experts (Mixtral, DeepSeekMoE): the CLI plans those per layer, where expert
    parallelism is searched. False for anything unreadable or unknown (the builder reports it)."""
    if isinstance(source, (str, Path)) and not is_hf_config(source):
        return False
    try:
        config, where = read_hf_config(Path(source) if isinstance(source, str) else source)
        return _family(config, where)[1].experts
    except PaseError:
        return False


def _family(config: Mapping[str, Any], where: str) -> tuple[str, Family]:
    """The ``model_type`` (or the one the ``architectures`` entry implies) and its family, checked."""
    architectures = config.get("architectures")
    if architectures is not None and (not isinstance(architectures, list)
                                      or not all(isinstance(a, str) for a in architectures)):
        raise FormatError(f"{where}: 'architectures' must be a list of class names, got {_short(architectures)}")
    model_type = config.get("model_type")
    if model_type is None:
        known = [_BY_ARCHITECTURE[a] for a in architectures or () if a in _BY_ARCHITECTURE]
        if not known:
            raise FormatError(f"{where}: no 'model_type', and no architecture pase knows in {_short(architectures)}; "
                              f"add the model_type ({', '.join(FAMILIES)})")
        model_type = known[0]
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise FormatError(f"{where}: model_type {_short(model_type)} is not a family pase builds; known: "
                          f"{', '.join(FAMILIES)}")
    family = FAMILIES[model_type]
    if architectures and family.architectures and not set(architectures) & set(family.architectures):
        raise FormatError(f"{where}: architectures {_short(architectures)}: pase builds the {model_type} training "
                          f"model {', '.join(family.architectures)}, whose head and parameters differ; set "
                          f"architectures to [{family.architectures[0]!r}] to plan that model")
    return model_type, family


def from_hf_config(source: str | Path | bytes | Mapping[str, Any], *, batch: int | None = None,
                   seq: int | None = None, name: str | None = None) -> Graph:
    """The training graph of the architecture a Hugging Face ``config.json`` describes (the module docstring).

    Parameters
    ----------
    source : path, bytes or dict
        The ``config.json`` file, its contents, or the parsed object.
    batch : int, optional
        Sequences per step (default :data:`DEFAULT_BATCH`, 512).
    seq : int, optional
        Tokens per sequence (default: the config's position count,
        ``max_position_embeddings`` or GPT-2's ``n_positions``, at most
        :data:`MAX_DEFAULT_SEQ`). Learned position tables (GPT-2, BERT)
        bound it; rotary families take any length.
    name : str, optional
        The graph's name (default: the config's ``_name_or_path``, else the
        file's stem unless it is ``config``, else the ``model_type``).

    Raises
    ------
    FormatError
        Unreadable or malformed JSON, an unknown ``model_type``, an
        architecture other than the family's training model, a missing
        size key, a key of the wrong type, or a variant pase does not build
        (relative positions, cross-attention, DeepSeekMoE's attention
        biases or interleaved dense blocks).
    GraphError
        Impossible sizes: heads that do not divide the width, key/value
        heads that do not divide the heads, more experts per token than
        experts, a sequence longer than a learned position table; or a batch
        or sequence that is not a positive integer.

    Examples
    --------
    >>> config = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 8,
    ...           "num_key_value_heads": 2, "intermediate_size": 160, "vocab_size": 100}
    >>> g = from_hf_config(config, batch=2, seq=16)
    >>> g.name, len(g), g.layer("layers.0.attn.k").size_of["h"]
    ('llama', 34, 2)
    """
    config, where = read_hf_config(source)
    return _build(config, where, _default_name(source, config, name), batch, seq)


def hf_batch_builder(source: str | Path | bytes | Mapping[str, Any], *, seq: int | None = None,
                     name: str | None = None) -> Callable[[int], Graph]:
    """``build(batch)``: :func:`from_hf_config` of this config at that batch (picklable, for worker processes).

    The config is read once, here, and built once at batch 1, so its errors
    (those of :func:`from_hf_config`) are raised here.

    >>> build = hf_batch_builder({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100})
    >>> build(8).layer("h.0.attn.q").size_of["b"], build(1).layer("wpe").size_of["v"]
    (8, 1024)
    """
    config, where = read_hf_config(source)
    build = partial(_at_batch, config, where, _default_name(source, config, name), seq)
    build(1)
    return build


def _default_name(source: Any, config: Mapping[str, Any], name: str | None) -> str | None:
    """``name``, else the config's ``_name_or_path``, else the file's stem unless it is ``config``; None: the
    model_type (known once the family is)."""
    if name is not None:
        return name
    given = config.get("_name_or_path")
    if isinstance(given, str) and given:
        return given
    stem = Path(source).stem if isinstance(source, (str, Path)) else ""
    return stem if stem and stem != "config" else None


def _build(config: dict[str, Any], where: str, name: str | None, batch: int | None, seq: int | None) -> Graph:
    model_type, family = _family(config, where)
    keys = ConfigKeys(config, where, model_type)
    if seq is None:
        seq = min(keys.size(*family.positions), MAX_DEFAULT_SEQ)
    try:
        with reusing_layers():  # repeated blocks built once
            return family.build(keys, model_type if name is None else name, DEFAULT_BATCH if batch is None else batch,
                                seq)
    except GraphError as exc:
        raise GraphError(f"{where}: {exc}") from None


def _at_batch(config: dict[str, Any], where: str, name: str | None, seq: int | None, batch: int) -> Graph:
    return _build(config, where, name, batch, seq)

"""What each training framework can run, at a stated version, and how its settings are written.

One module per framework: :mod:`~pase.frameworks.megatron` (Megatron-LM main
of 2026 with megatron-core 0.16), :mod:`~pase.frameworks.torchtitan`
(torchtitan 0.2.2), :mod:`~pase.frameworks.deepspeed` (DeepSpeed 0.16-0.19).
Each says which 3-D configurations it runs (:meth:`Framework.problems`, naming
every setting it lacks), where it cuts the pipeline (whole transformer blocks,
:mod:`~pase.frameworks.base`) and writes its export. The search keeps only
what a framework runs (``search_training(..., framework=)``); ``pase export``
writes and refuses with the same rules.
"""

from __future__ import annotations

from pase.errors import ConfigurationError, FormatError
from pase.frameworks.base import (
    BlockLayout, Framework, NotExpressibleError, TrainingSettings, block_layout, stage_blocks,
)
from pase.frameworks.deepspeed import DEEPSPEED
from pase.frameworks.megatron import MEGATRON, read_script
from pase.frameworks.torchtitan import TORCHTITAN, read_toml

__all__ = ["FRAMEWORKS", "FRAMEWORK_CHOICES", "framework", "Framework", "NotExpressibleError", "TrainingSettings",
           "BlockLayout", "block_layout", "stage_blocks", "read_export", "framework_cuts"]

FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (MEGATRON, TORCHTITAN, DEEPSPEED)}
# What --framework takes: one framework, or "any" (the best plan, and the best each framework runs).
FRAMEWORK_CHOICES = (*FRAMEWORKS, "any")


def framework(name: str) -> Framework:
    """The framework called ``name`` (``megatron``, ``torchtitan``, ``deepspeed``).

    Raises ``ConfigurationError`` naming the choices for any other name.
    """
    if name not in FRAMEWORKS:
        raise ConfigurationError(f"unknown framework {name!r}; choose one of {', '.join(FRAMEWORK_CHOICES)}")
    return FRAMEWORKS[name]


def read_export(text: str) -> tuple[str, TrainingSettings, tuple[int, ...]]:
    """A framework export pase wrote, read back: ``(framework name, settings, blocks per virtual stage)``.

    Megatron-LM's shell text and torchtitan's job TOML carry every setting
    of a 3-D plan (the blocks per stage are empty when an export leaves them
    to the framework's even split); a DeepSpeed configuration does not (the
    tensor and pipeline sizes are its launcher's).

    Raises ``FormatError`` naming why the text is none of them.
    """
    if "torchrun" in text and ".py" in text:
        settings, counts = read_script(text)
        return "megatron", settings, counts
    if "[parallelism]" in text:
        settings, counts = read_toml(text)
        return "torchtitan", settings, counts
    if "train_batch_size" in text and "zero_optimization" in text:
        raise FormatError("a DeepSpeed configuration does not carry the tensor, pipeline and context sizes (they are "
                          "its launcher's); evaluate the plan pase wrote, or its Megatron-LM export")
    raise FormatError("neither a plan pase wrote nor a Megatron-LM or torchtitan export of one")


def framework_cuts(fw: Framework | None, build, cluster, par, options, cache: dict) -> tuple[int, ...] | None:
    """The stage cuts framework ``fw`` runs for configuration ``par`` of the model ``build(batch)`` builds on
    ``cluster`` (None for one stage): between whole blocks, as :meth:`Framework.cuts` places them for the
    layers' times under ``options`` (``fw`` None: balanced over the blocks, whatever runs them, as
    ``--framework any`` cuts). ``cache`` as :func:`pase.model.training.cached_times`.

    Raises ``ConfigurationError`` naming what ``fw`` does not run of ``par``
    (:meth:`Framework.problems`), or when the model has fewer blocks than
    virtual stages or none.
    """
    from pase.model.memory import MemoryOptions
    from pase.model.training import cached_times, check_devices, cut_weights_s

    from pase.frameworks.base import balanced_block_cuts

    lt = cached_times(build, cluster, par, options, MemoryOptions(), cache)[par.recompute]
    problems = [] if fw is None else fw.problems(par, precision=options.precision, attention=lt.attention,
                                                 experts=lt.experts is not None)
    if problems:
        raise ConfigurationError(f"{fw.title} does not run {par.describe()}: " + "; ".join(problems))
    pieces = par.pipeline * par.virtual_stages
    if pieces == 1:
        return None
    _, data_k, _ = check_devices(par, cluster)
    weights = cut_weights_s(lt, cluster, data_k, par.zero, par.overlap)
    layout = block_layout([layer.name for layer in lt.layers])
    return balanced_block_cuts(weights, pieces, layout) if fw is None else fw.cuts(weights, pieces, layout)

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

from pase.errors import ConfigurationError
from pase.frameworks.base import (
    BlockLayout, Framework, NotExpressibleError, TrainingSettings, block_layout, stage_blocks,
)
from pase.frameworks.deepspeed import DEEPSPEED
from pase.frameworks.megatron import MEGATRON
from pase.frameworks.torchtitan import TORCHTITAN

__all__ = ["FRAMEWORKS", "FRAMEWORK_CHOICES", "framework", "Framework", "NotExpressibleError", "TrainingSettings",
           "BlockLayout", "block_layout", "stage_blocks"]

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

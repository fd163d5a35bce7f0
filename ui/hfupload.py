"""A Hugging Face ``config.json`` uploaded in the sidebar to plan in 3-D on every page, as ``pase solve config.json`` plans it.

Plain logic, no Streamlit: the upload's bytes become a picklable batch builder
(:func:`pase.io.hf_config.hf_batch_builder`, for the page's worker processes) with
the model's name, the content's digest (its identity in caches: two uploads of one
name may differ) and the default global batch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from pase.errors import FormatError
from pase.io.hf_config import DEFAULT_BATCH, hf_batch_builder
from pase.ir.graph import Graph

__all__ = ["UploadedConfig", "uploaded_config"]


@dataclass(frozen=True)
class UploadedConfig:
    """An uploaded config ready to plan: ``build(batch)`` gives its training graph at that global batch."""

    name: str
    digest: str  # sha256 of the file's bytes, hex
    build: Callable[[int], Graph]
    default_batch: int = DEFAULT_BATCH


def uploaded_config(data: bytes, filename: str) -> UploadedConfig:
    """The model an uploaded Hugging Face ``config.json`` (its bytes, ``filename`` for messages) describes.

    Built once per content (a small cache): reading and building at batch 1 checks every size.

    Raises
    ------
    FormatError
        Not a Hugging Face config (a pase graph file belongs in the sidebar's upload), or what
        :func:`pase.io.hf_config.from_hf_config` refuses.
    GraphError
        Impossible sizes (:func:`pase.io.hf_config.from_hf_config`).
    """
    return _read(bytes(data), filename)


@lru_cache(maxsize=8)
def _read(data: bytes, filename: str) -> UploadedConfig:
    try:
        parsed = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError):
        parsed = None  # hf_batch_builder names the problem
    if isinstance(parsed, dict) and "format" in parsed:
        raise FormatError(f"{filename} is a pase graph file, not a Hugging Face config.json: upload it in the "
                          "sidebar (Graph: Upload) and plan it on the Explorer")
    build = hf_batch_builder(data)
    return UploadedConfig(name=build(1).name, digest=hashlib.sha256(data).hexdigest(), build=build)

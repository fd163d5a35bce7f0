"""Open the app on a problem from its address: ``/?model=llama3-8b&cluster=dgx-h100&devices=64``.

A link may name a sample model (as ``pase solve MODEL`` does), a cluster preset (``--cluster``) and a device
count (``--devices``), each optional. The sidebar (:mod:`ui.sidebar`) starts a session on them; a name that
is not known is told in one line with the closest known names, as the CLI tells it
(:func:`pase.errors.did_you_mean`), and the default is kept in its place. Plain logic, no Streamlit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pase.errors import did_you_mean
from pase.hardware.cluster import PRESETS
from pase.limits import MAX_DEVICES
from pase.models import SAMPLES
from ui.fmt import md

__all__ = ["Link", "parse_link"]

# Characters of a typed value quoted back in a message: a link is anyone's text.
QUOTED_CHARS = 60


@dataclass(frozen=True)
class Link:
    """What an address asks for: known names only (None: not asked, or refused), and a line per refusal
    (markdown, user text escaped)."""

    model: str | None = None
    preset: str | None = None
    devices: int | None = None
    errors: tuple[str, ...] = ()


def _quoted(value: str) -> str:
    return md(repr(value if len(value) <= QUOTED_CHARS else value[:QUOTED_CHARS] + "..."))


def _value(params: Mapping, key: str) -> str | None:
    """The last value of ``key`` (a query parameter may repeat), or None."""
    value = params.get(key)
    if isinstance(value, (list, tuple)):
        value = value[-1] if value else None
    return None if value is None else str(value)


def parse_link(params: Mapping) -> Link:
    """The problem the query parameters ``params`` (``st.query_params`` or a dict) ask for.

    Keys: ``model`` (a sample name), ``cluster`` (a preset name), ``devices`` (a whole number from 1 to
    ``MAX_DEVICES``); other keys are ignored. An unknown name or a bad count is left out of the result and
    told in :attr:`Link.errors`, with the closest known names.

    >>> parse_link({"model": "llama3-8b", "devices": "64"}).devices
    64
    >>> parse_link({"model": "lama3-8b"}).model is None
    True
    """
    model, preset, devices, errors = _value(params, "model"), _value(params, "cluster"), _value(params, "devices"), []
    if model is not None and model not in SAMPLES:
        hint = did_you_mean(model, SAMPLES)
        errors.append(f"Unknown model {_quoted(model)} in the link; "
                      + (md(hint) if hint else "choose a sample under **Sample graph**."))
        model = None
    if preset is not None and preset not in PRESETS:
        hint = did_you_mean(preset, PRESETS)
        errors.append(f"Unknown cluster preset {_quoted(preset)} in the link; "
                      + (md(hint) if hint else "choose one under **Cluster preset**."))
        preset = None
    count = None
    if devices is not None:
        try:
            count = int(devices)
        except ValueError:
            count = None
        if count is None or not 1 <= count <= MAX_DEVICES:
            errors.append(f"Devices {_quoted(devices)} in the link: give a whole number from 1 to {MAX_DEVICES:,}.")
            count = None
    return Link(model, preset, count, tuple(errors))

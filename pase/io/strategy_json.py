"""Reading strategy files: layer name -> configuration, from JSON (``docs/plan-format.md``).

Two forms are accepted, so a plan saved by the app or by ``pase solve --json``
can be costed again (``pase evaluate --plan``, the app's Compare page):

* a **plan document**, what :meth:`pase.planner.Plan.to_dict` writes: an
  object whose ``layers`` is a list of objects, each with a ``name`` and a
  ``config``; every other key is ignored. An optional ``"format":
  "pase-plan"`` and ``"version": 1`` mark it;
* a **strategy mapping**: an object whose keys are layer names and whose
  values are configurations, e.g. ``{"fc6": [1, 8, 1]}``.

A configuration is a list of positive integers, one split factor per
dimension of the layer, in the layer's dimension order. Whether it suits the
layer (its length, factors dividing the sizes) is checked when the strategy is
costed (:func:`pase.planner.evaluate`); layers a file leaves out are then data
parallel (:func:`pase.analysis.baselines.evaluate_strategy`).

Files come from users of a shared app server: they are bounded by
:data:`pase.limits.MAX_FILE_BYTES` and :data:`pase.limits.MAX_LAYERS`, and
every malformed one raises :class:`~pase.errors.FormatError` naming the
problem.
"""

from __future__ import annotations

import json
from pathlib import Path

from pase.errors import FormatError
from pase.io.files import read_limited
from pase.limits import MAX_DIM, MAX_FILE_BYTES, MAX_LAYERS

__all__ = ["FORMAT", "VERSION", "strategy_from_dict", "loads_strategy", "load_strategy"]

FORMAT = "pase-plan"
VERSION = 1
# The graph format's marker: a graph file passed as a plan gets a message saying so.
_GRAPH_FORMAT = "pase-graph"


def _short(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for messages about uploaded data."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _config(value: object, where: str) -> tuple[int, ...]:
    """``value`` as a configuration: a non-empty list of integers from 1 to ``MAX_DIM``."""
    fix = "write one whole split factor of 1 or more per dimension, e.g. [1, 8, 1]"
    if not isinstance(value, list) or not value:
        raise FormatError(f"{where}: the configuration must be a non-empty list of positive integers, "
                          f"got {_short(value)}; {fix}")
    for f in value:
        # bool is an int subclass, and floats (2.5, 2.0, inf from 1e400, nan) are not split factors.
        if isinstance(f, bool) or not isinstance(f, int) or not 1 <= f <= MAX_DIM:
            raise FormatError(f"{where}: split factor {_short(f)} in {_short(value)} is not a positive integer "
                              f"(at most {MAX_DIM}); {fix}")
    return tuple(value)


def _is_plan_document(data: dict) -> bool:
    layers = data.get("layers")
    return "format" in data or (isinstance(layers, list) and all(isinstance(r, dict) for r in layers))


def strategy_from_dict(data: object) -> dict[str, tuple[int, ...]]:
    """The strategy (layer name -> configuration) held by a parsed plan document or strategy mapping.

    Raises
    ------
    FormatError
        ``data`` is not an object, carries another format's marker or
        version, lists a layer twice, lists more than ``MAX_LAYERS`` layers,
        or a configuration is not a list of positive integers; the message
        names the layer.

    Examples
    --------
    >>> strategy_from_dict({"fc6": [1, 8, 1]})
    {'fc6': (1, 8, 1)}
    >>> strategy_from_dict({"format": "pase-plan", "version": 1, "cost": 3.5,
    ...                     "layers": [{"name": "fc6", "op": "FullyConnected", "config": [1, 8, 1]}]})
    {'fc6': (1, 8, 1)}
    >>> strategy_from_dict({"fc6": [1, 2.5, 1]})
    Traceback (most recent call last):
    ...
    pase.errors.FormatError: layer 'fc6': split factor 2.5 in [1, 2.5, 1] is not a positive integer (at most 2147483647); write one whole split factor of 1 or more per dimension, e.g. [1, 8, 1]
    """
    if not isinstance(data, dict):
        raise FormatError(f"a strategy file must hold a JSON object (a plan, or layer name -> configuration), "
                          f"not {type(data).__name__}")
    if not _is_plan_document(data):
        if len(data) > MAX_LAYERS:
            raise FormatError(f"the strategy lists {len(data)} layers; at most {MAX_LAYERS} are accepted")
        return {name: _config(cfg, f"layer {_short(name)}") for name, cfg in data.items()}
    fmt = data.get("format", FORMAT)
    if fmt != FORMAT:
        hint = " (that is a graph file: pass it as the model, not as the plan)" if fmt == _GRAPH_FORMAT else ""
        raise FormatError(f"field 'format' must be {FORMAT!r} for a plan, got {_short(fmt)}{hint}")
    version = data.get("version", VERSION)
    if isinstance(version, bool) or version != VERSION:
        raise FormatError(f"field 'version' must be {VERSION}, got {_short(version)}; this pase reads version {VERSION} "
                          "plans")
    records = data.get("layers")
    if not isinstance(records, list):
        raise FormatError(f"field 'layers' must be a list of {{\"name\", \"config\"}} objects, got {_short(records)}")
    if len(records) > MAX_LAYERS:
        raise FormatError(f"the plan lists {len(records)} layers; at most {MAX_LAYERS} are accepted")
    strategy: dict[str, tuple[int, ...]] = {}
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise FormatError(f"layers[{i}] must be an object with 'name' and 'config', got {_short(record)}")
        name = record.get("name")
        if not isinstance(name, str) or not name:
            raise FormatError(f"layers[{i}]: field 'name' must be a layer name (a non-empty string), got {_short(name)}")
        if name in strategy:
            raise FormatError(f"layers[{i}]: layer {name!r} is listed twice; keep one configuration per layer")
        if "config" not in record:
            raise FormatError(f"layers[{i}] ({name!r}) has no field 'config'; add its split factors, e.g. [1, 8, 1]")
        strategy[name] = _config(record["config"], f"layer {name!r}")
    return strategy


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """``json`` object hook: refuse a key given twice (the json module would silently keep the last)."""
    out = {}
    for key, value in pairs:
        if key in out:
            raise FormatError(f"key {_short(key)} appears twice in one object; list each layer (and each field) "
                              "once")
        out[key] = value
    return out


def loads_strategy(text: str | bytes) -> dict[str, tuple[int, ...]]:
    """Parse a strategy file's contents (JSON text or bytes): layer name -> configuration.

    Raises
    ------
    FormatError
        Larger than ``MAX_FILE_BYTES``, not JSON (or nested too deeply), a
        key given twice, or not a strategy (see :func:`strategy_from_dict`).

    Examples
    --------
    >>> loads_strategy(b'{"fc6": [1, 8, 1], "fc7": [1, 1, 8]}')
    {'fc6': (1, 8, 1), 'fc7': (1, 1, 8)}
    >>> loads_strategy('{"fc6": [1, 8, 1], "fc6": [8, 1, 1]}')
    Traceback (most recent call last):
    ...
    pase.errors.FormatError: key 'fc6' appears twice in one object; list each layer (and each field) once
    """
    if len(text) > MAX_FILE_BYTES:
        raise FormatError(f"the file is {len(text) / 2**20:.1f} MiB; at most {MAX_FILE_BYTES / 2**20:.0f} MiB is "
                          "accepted")
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise FormatError("not valid JSON: nested too deeply (a strategy file is a flat object of lists)") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, or an integer with too many digits
        raise FormatError(f"not valid JSON: {' '.join(str(exc).split())[:200]}") from None
    return strategy_from_dict(data)


def load_strategy(path: str | Path) -> dict[str, tuple[int, ...]]:
    """Read a strategy file; errors as :func:`loads_strategy`, prefixed with the file's name.

    Raises
    ------
    FormatError
        The file is missing, a directory, unreadable, larger than
        ``MAX_FILE_BYTES`` (read in bounded chunks by
        :func:`pase.io.files.read_limited`, so a device or a pipe is
        refused too) or malformed.
    """
    path = Path(path)
    data = read_limited(path, MAX_FILE_BYTES, what="plan file")
    try:
        return loads_strategy(data)
    except FormatError as exc:
        raise FormatError(f"{path.name}: {exc}") from None

"""Exception classes raised by :mod:`pase`.

Every error derives from :class:`PaseError`, so callers (the CLI, the app) can
catch one class and show its message, which always names the bad value
(:func:`did_you_mean` adds the known names closest to a misspelt one).
"""

import difflib
from collections.abc import Iterable

__all__ = [
    "did_you_mean",
    "PaseError",
    "GraphError",
    "ConfigurationError",
    "ClusterError",
    "FormatError",
    "SearchTooLargeError",
]


class PaseError(Exception):
    """Base class of every error raised by pase."""


class GraphError(PaseError):
    """A computation graph is invalid (cycle, disconnected, shape mismatch...)."""


class ConfigurationError(PaseError):
    """A layer configuration is invalid for its layer or cluster."""


class ClusterError(PaseError):
    """A cluster description is impossible (no devices, zero bandwidth...)."""


class FormatError(PaseError):
    """A file does not follow the format it claims to be in."""


class SearchTooLargeError(PaseError):
    """The strategy search would need more memory than its budget allows."""


def did_you_mean(name: object, known: Iterable[str], *, limit: int = 3) -> str:
    """``"did you mean 'a' or 'b'?"``: the known names closest to a misspelt ``name``, best first, for an
    error message; ``""`` when none is close (or ``name`` is no string).

    Closeness is :func:`difflib.get_close_matches`' ratio, ignoring case, at most ``limit`` names.

    >>> did_you_mean("lama3-8b", ["alexnet", "llama3-8b", "llama3-70b"])
    "did you mean 'llama3-8b' or 'llama3-70b'?"
    >>> did_you_mean("bert", ["alexnet", "llama3-8b"])
    ''
    """
    if not isinstance(name, str):
        return ""
    by_folded: dict[str, str] = {}
    for k in known:
        by_folded.setdefault(str(k).casefold(), str(k))
    close = [by_folded[k] for k in difflib.get_close_matches(name.casefold(), list(by_folded), n=limit, cutoff=0.6)]
    if not close:
        return ""
    quoted = [repr(c) for c in close]
    listed = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    return f"did you mean {listed}?"

"""Exception classes raised by :mod:`pase`.

Every error derives from :class:`PaseError`, so callers (the CLI, the app) can
catch one class and show its message, which always names the bad value.
"""

__all__ = [
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

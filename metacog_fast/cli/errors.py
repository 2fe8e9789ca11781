"""The error a command raises for input its configuration rejects (kept apart from tyro, so that
``metacog --help`` and ``metacog info`` do not import it)."""
from __future__ import annotations


class ConfigError(ValueError):
    """A parsed command line that its configuration rejects; the message names the flag."""

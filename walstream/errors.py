"""The one root error class every package's errors derive from.

Each package (``wal``, ``receiver``, ``driver``, ``checkpoint``, ``walstream``)
has its own ``errors.py`` whose classes subclass :class:`WalStreamError`, so a
user can catch everything this project raises with one ``except``.
"""

from __future__ import annotations


class WalStreamError(Exception):
    """Root of every error raised on purpose by this project."""


class ConfigError(WalStreamError, ValueError):
    """A configuration value is missing, of the wrong type or out of range."""


class CorruptDataError(WalStreamError):
    """Bytes that should hold one of our Avro envelopes do not decode."""


class UnknownSchemaVersionError(CorruptDataError):
    """An envelope carries a schema version this code does not know.

    Raised instead of guessing, so that data written by a newer release is never
    silently misread by an older one.
    """

    def __init__(self, kind: str, version: int, known: tuple[int, ...]) -> None:
        self.kind = kind
        self.version = version
        self.known = known
        super().__init__(
            f"{kind}: unknown schema version {version} (this release reads versions "
            f"{', '.join(map(str, known))}); upgrade walstream to read it"
        )


class PrerequisiteError(WalStreamError):
    """Something the machine must provide (Java, a free port, a binary) is missing."""


class BrokerError(WalStreamError):
    """The embedded broker could not be started, found or stopped."""


class BrokerPortBusyError(BrokerError, PrerequisiteError):
    """The port asked for the embedded broker is already taken by another process."""


class PackageError(WalStreamError):
    """The executors' environment archive (`walstream package`) could not be built."""


class JvmArchiveError(WalStreamError):
    """The driver JVM's class archive could not be written or tried."""

"""Typed errors of the RPC wire protocol; all derive from :class:`RpcError`.

Raised on both sides: by the driver decoding a receiver's request and by a
receiver decoding the driver's answer or command.
"""

from __future__ import annotations

from walstream.errors import CorruptDataError, WalStreamError


class RpcError(WalStreamError):
    """Root of every error the ``walstream.rpc`` package raises."""


class RpcMessageError(RpcError, CorruptDataError):
    """An RPC body is truncated, garbage, or over a bound (message size, items in an
    array, bytes in a string); the message names the bound. Nothing was decoded."""

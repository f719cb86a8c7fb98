"""The receivers' settings read from the application's Spark conf.

``spark.walstream.receiver.maxBlockBytes`` caps the bytes of one block (Spark has
no such key: its blocks are cut by time only). A size such as ``64m``, ``512k`` or
a bare number of bytes, as Spark's byteStringAs reads it; refused with a
:class:`~walstream.errors.ConfigError` naming the key and the allowed range when
it does not parse or a block that large could be refused by the WAL.
"""

from __future__ import annotations

from walstream.errors import ConfigError
from walstream.receiver.block_generator import MAX_BLOCK_BYTES, BlockGeneratorConfig

MAX_BLOCK_BYTES_KEY = "spark.walstream.receiver.maxBlockBytes"

_BYTE_UNITS = (("kb", 1 << 10), ("mb", 1 << 20), ("gb", 1 << 30), ("k", 1 << 10),
               ("m", 1 << 20), ("g", 1 << 30), ("b", 1))


def check_max_block_bytes(value: int, what: str = "max_block_bytes") -> int:
    """``value`` when receivers may use it as their block cap, else a ConfigError
    naming ``what``; the rule is :class:`BlockGeneratorConfig`'s own."""
    try:
        BlockGeneratorConfig(max_block_bytes=value)
    except ConfigError as exc:
        raise ConfigError(f"{what}: {exc}, not {value!r}") from None
    return value


def conf_bytes(raw: str, key: str) -> int:
    """A Spark size setting ("4096", "512k", "64m", "1g"; a bare number is bytes)."""
    text = raw.strip().lower()
    for suffix, mult in _BYTE_UNITS:
        if text.endswith(suffix) and text[: -len(suffix)].strip().isdigit():
            return int(text[: -len(suffix)]) * mult
    if text.isdigit():
        return int(text)
    raise ConfigError(f"{key} must be a size such as 4096, 512k or 64m (1..{MAX_BLOCK_BYTES} "
                      f"bytes), not {raw!r}")


def max_block_bytes_from_conf(conf: dict[str, str], default: int) -> int:
    """The block byte cap ``conf`` sets, else ``default``; validated."""
    raw = conf.get(MAX_BLOCK_BYTES_KEY)
    if raw is None:
        return default
    return check_max_block_bytes(conf_bytes(raw, MAX_BLOCK_BYTES_KEY), MAX_BLOCK_BYTES_KEY)

"""Shared checks of the decoder fuzz tests: every input gets a value or a typed error.

"Typed" means a subclass of :class:`~walstream.errors.WalStreamError`; any other
exception (IndexError, EOFError, UnicodeDecodeError, RecursionError, an
``AssertionError`` used as a type check) fails the test. Each decode is also
bounded: in time, and in the memory it allocates (traced by tracemalloc), so a
declared length of 2**62 that a decoder believed would fail here, not on a host.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from walstream.avro_codec import avro_long
from walstream.errors import WalStreamError

#: A bounded, fast profile: the whole fuzz set runs in seconds. No example
#: database, so no directory is left in the checkout.
FUZZ = settings(max_examples=150, deadline=timedelta(seconds=2), database=None,
                suppress_health_check=[HealthCheck.too_slow])

#: The longest one decode may take, and the memory it may allocate beyond the input.
MAX_SECONDS = 1.0
MAX_EXTRA_BYTES = 4 * 1024 * 1024

#: Declared lengths/counts that must be refused without allocating them.
HUGE = (2**62, 2**31, -(2**62), -1)

garbage = st.binary(max_size=512)


def decodes_or_typed_error(decode: Callable[[Any], object], data: Any) -> object | None:
    """Run ``decode(data)``; return its value, or None after a typed error.

    Fails on any other exception, on more than MAX_SECONDS, or on allocating more
    than MAX_EXTRA_BYTES plus a few times the input's size.
    """
    size = len(data) if isinstance(data, bytes | bytearray | memoryview) else 0
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    t0 = time.perf_counter()
    try:
        value: object | None = decode(data)
    except WalStreamError:
        value = None
    finally:
        elapsed = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1] - base
        if started:
            tracemalloc.stop()
    assert elapsed < MAX_SECONDS, f"decoding {size} bytes took {elapsed:.2f}s"
    assert peak < MAX_EXTRA_BYTES + 8 * size, f"decoding {size} bytes allocated {peak}"
    return value


def truncations(valid: bytes) -> Iterator[bytes]:
    """Every proper prefix of ``valid``, the empty one included."""
    for n in range(len(valid)):
        yield valid[:n]


def huge_lengths(prefix: bytes, tail: bytes = b"abc") -> Iterator[bytes]:
    """``prefix`` followed by each HUGE Avro long and a short ``tail``: a bytes,
    string, array or map length (or union/enum index) that is a lie."""
    for n in HUGE:
        yield prefix + avro_long(n) + tail


WRONG_TYPES: tuple[Any, ...] = (None, "text", 7, 1.5, [b"a"], {"a": 1}, object())

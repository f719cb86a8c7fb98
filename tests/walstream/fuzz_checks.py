"""Shared checks of the decoder fuzz tests: every input gets a value or a typed error.

"Typed" means a subclass of :class:`~walstream.errors.WalStreamError`; any other
exception (IndexError, EOFError, UnicodeDecodeError, RecursionError, an
``AssertionError`` used as a type check) fails the test. Each decode is also
bounded: in time, and in the memory it allocates (traced by tracemalloc), so a
declared length of 2**62 that a decoder believed would fail here, not on a host.

:class:`DecoderContract`, :class:`TruncationsRaise` and :class:`FlippedBytes` hold
the checks the decoders' fuzz files share: a file declares, say, ``class
TestBlockDecoder(TruncationsRaise, FlippedBytes)`` with its decoder and valid
encodings, and keeps only its decoder's own tests.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
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


#: FUZZ for the contract's inherited @given methods, which every decoder's subclass
#: runs with its own instance. Hypothesis fails that (HealthCheck.differing_executors)
#: lest a failure saved in its example database replay under another class; FUZZ
#: keeps no database, and the methods read only what their subclass declares.
CONTRACT_FUZZ = settings(FUZZ, suppress_health_check=[*FUZZ.suppress_health_check,
                                                      HealthCheck.differing_executors])


class DecoderContract:
    """The fuzz checks every decoder passes; a ``Test*`` subclass declares the decoder.

    Not named ``Test*``, so pytest collects only the subclasses.
    """

    #: The decoder under test, as ``staticmethod(the_decoder)``.
    @staticmethod
    def decode(data: Any, /) -> object:
        raise NotImplementedError

    #: The error type its truncated or mistyped input must raise.
    error: type[Exception]
    #: Valid encodings by name (the test id), as given to :meth:`wrap`; read by
    #: TruncationsRaise and FlippedBytes.
    valid: Mapping[str, bytes]
    #: Valid starts of an encoding (a magic and version, a kind, a tag) for a garbage body.
    prefixes: tuple[bytes, ...]
    #: The non-bytes inputs that must raise ``error`` naming "not bytes".
    wrong_types: tuple[Any, ...] = WRONG_TYPES

    @staticmethod
    def wrap(body: bytes) -> bytes:
        """What the decoder reads around an encoded body (checkpoint data: a CRC)."""
        return body

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "valid" in metafunc.fixturenames:
            metafunc.parametrize("valid", list(self.valid.values()), ids=list(self.valid))
        if "wrong" in metafunc.fixturenames:
            metafunc.parametrize("wrong", self.wrong_types, ids=lambda w: type(w).__name__)

    @CONTRACT_FUZZ
    @given(garbage)
    def test_random_bytes_decode_or_raise_a_typed_error(self, data: bytes) -> None:
        decodes_or_typed_error(self.decode, data)

    @CONTRACT_FUZZ
    @given(st.data(), garbage)
    def test_a_valid_prefix_with_a_garbage_body_decodes_or_raises_a_typed_error(
        self, draw: st.DataObject, body: bytes
    ) -> None:
        prefix = draw.draw(st.sampled_from(self.prefixes), label="prefix")
        decodes_or_typed_error(self.decode, self.wrap(prefix + body))

    def test_input_of_the_wrong_type_raises_a_typed_error(self, wrong: object) -> None:
        with pytest.raises(self.error, match="not bytes"):
            self.decode(wrong)


class TruncationsRaise(DecoderContract):
    """And: no proper prefix of a valid encoding decodes (an encoding that says how
    long it is)."""

    def test_every_truncation_of_a_valid_encoding_raises_a_typed_error(self,
                                                                      valid: bytes) -> None:
        """Every proper prefix of the wrapped encoding, and (when :meth:`wrap` adds a
        check such as a CRC) every proper prefix of the body under a right wrap, so the
        decoder behind the check must refuse it too."""
        cuts = [*truncations(self.wrap(valid)), *map(self.wrap, truncations(valid))]
        for cut in dict.fromkeys(cuts):
            with pytest.raises(self.error):
                self.decode(cut)


class FlippedBytes(DecoderContract):
    """And: a valid encoding with any one byte changed (under a right :meth:`wrap`)
    decodes or raises a typed error."""

    @CONTRACT_FUZZ
    @given(st.data(), st.integers(0, 255))
    def test_a_flipped_byte_decodes_or_raises_a_typed_error(self, draw: st.DataObject,
                                                            value: int) -> None:
        valid = draw.draw(st.sampled_from(list(self.valid.values())), label="valid")
        data = bytearray(valid)
        data[draw.draw(st.integers(0, len(data) - 1), label="pos")] = value
        decodes_or_typed_error(self.decode, self.wrap(bytes(data)))

"""TextRun: stored items of one text tag, kept as their bodies joined by newlines.

Receivers of text (socket lines, Kafka records with no key) get their records as
bytes that already are, or join in one call into, the text a v2 or v3 block
stores: the bodies joined by newlines. A ``TextRun`` carries that text through
the block generator to :meth:`walstream.receiver.block.Block.encode` as it is, so a record
costs the receiver no per-record tag prefix and the pushing thread no per-record
slice and join: the block's text is the runs' chunks laid end to end.

It is a read-only sequence of the item encodings it stands for (``tag + body``
each), built on demand, so any code written for a list of item encodings still
reads it correctly, only without the saving.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

from walstream.receiver.items import STR_TAG, VALUE_TAG

#: The tags whose items a text block holds: ``str`` items (v2), ``(None, str)`` (v3).
TEXT_TAGS = (STR_TAG, VALUE_TAG)


def _check_tag(tag: bytes) -> None:
    if tag not in TEXT_TAGS:
        raise ValueError(f"not a text item tag: {tag!r}")


@dataclass(frozen=True, eq=False)
class TextRun(Sequence[bytes]):
    """``length`` item encodings ``tag + body``, no body holding a newline, kept as
    ``chunks``: each one or more bodies joined by newlines, in order. Build one
    with :meth:`join`, :meth:`of_text` or :meth:`concat`, which establish what the
    fields promise."""

    tag: bytes
    chunks: tuple[bytes, ...]
    length: int

    @classmethod
    def join(cls, tag: bytes, bodies: list[bytes], text: bytes | None = None
             ) -> TextRun | None:
        """The run of the items ``tag + body`` for ``bodies`` (bytes), or None when
        there is none or a body holds a newline (it would read back as two).
        ``text``: ``b"\\n".join(bodies)`` when the caller already has it."""
        _check_tag(tag)
        if not bodies:
            return None
        if text is None:
            text = b"\n".join(bodies)
        # n bodies joined hold n - 1 newlines exactly when none holds its own.
        if text.count(b"\n") != len(bodies) - 1:
            return None
        return cls(tag, (text,), len(bodies))

    @classmethod
    def of_text(cls, tag: bytes, text: bytes) -> TextRun:
        """The run of the lines of ``text`` (lines joined by newlines; one line when
        it holds none), each line a body: ``tag + line`` each."""
        _check_tag(tag)
        return cls(tag, (text,), text.count(b"\n") + 1)

    @classmethod
    def concat(cls, runs: Sequence[TextRun]) -> TextRun:
        """The runs, in order, as one (they must share a tag)."""
        tag = runs[0].tag
        if any(r.tag != tag for r in runs):
            raise ValueError("runs of different tags do not make one run")
        return cls(tag, tuple(c for r in runs for c in r.chunks), sum(r.length for r in runs))

    @property
    def body_bytes(self) -> int:
        """The bytes of all bodies, newlines not counted."""
        return sum(map(len, self.chunks)) - (self.length - len(self.chunks))

    def fits(self, limit: int) -> bool:
        """Whether no item encoding is over ``limit`` bytes: at once when no chunk
        is, else from the chunks' lines."""
        extra = len(self.tag)
        if max(map(len, self.chunks)) + extra <= limit:
            return True
        return all(max(map(len, c.split(b"\n"))) + extra <= limit for c in self.chunks)

    def text_parts(self) -> list[bytes]:
        """The block text's parts: the chunks with a newline between each two
        (``b"".join`` of them is every body joined by newlines)."""
        parts = [self.chunks[0]]
        for chunk in self.chunks[1:]:
            parts += (b"\n", chunk)
        return parts

    def items(self) -> list[bytes]:
        """The item encodings, built (a copy of each body)."""
        return list(self)

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[bytes]:
        add = self.tag.__add__
        for chunk in self.chunks:
            yield from map(add, chunk.split(b"\n"))

    @overload
    def __getitem__(self, i: int) -> bytes: ...
    @overload
    def __getitem__(self, i: slice) -> list[bytes]: ...
    def __getitem__(self, i: int | slice) -> bytes | list[bytes]:
        return self.items()[i]

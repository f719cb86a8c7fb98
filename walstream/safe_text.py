"""Text from elsewhere, made safe to log and to print on a terminal."""

from __future__ import annotations


def escape_controls(text: str) -> str:
    """``text`` with each character that is not printable (line breaks, escape
    sequences, other control and separator characters) written as its Python escape,
    so a receiver-supplied string cannot forge log lines or drive a terminal when
    ``walstream status`` prints it. Printable text, any script, is left alone."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


__all__ = ["escape_controls"]

"""Every public name of pyspark.streaming's StreamingContext and DStream exists on ours,
with a compatible signature (same parameter names, order, kinds and defaults; ours may
only add trailing optional parameters)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from pyspark.streaming import DStream as PyDStream
from pyspark.streaming import StreamingContext as PyStreamingContext

from walstream.driver import DStream, KafkaUtils, StreamingContext, StreamingListener


def public_names(cls: type) -> list[str]:
    return sorted(n for n in dir(cls) if not n.startswith("_"))


CONTEXT_NAMES = public_names(PyStreamingContext)
DSTREAM_NAMES = public_names(PyDStream)
PAIRS = [(PyStreamingContext, StreamingContext, n) for n in CONTEXT_NAMES] + \
        [(PyDStream, DStream, n) for n in DSTREAM_NAMES]


def test_pyspark_has_the_expected_number_of_names() -> None:
    assert len(CONTEXT_NAMES) == 17
    assert len(DSTREAM_NAMES) == 39
    assert len(PAIRS) == 56


def _kind(cls: type, name: str) -> str:
    raw = inspect.getattr_static(cls, name)
    if isinstance(raw, property):
        return "property"
    if isinstance(raw, classmethod):
        return "classmethod"
    if isinstance(raw, staticmethod):
        return "staticmethod"
    return "method" if callable(raw) else type(raw).__name__


def _same_default(ours: Any, theirs: Any) -> bool:
    if ours is theirs:
        return True
    try:
        return bool(ours == theirs)
    except Exception:
        return False


@pytest.mark.parametrize(("theirs_cls", "ours_cls", "name"), PAIRS,
                         ids=[f"{t.__name__}.{n}" for t, _, n in PAIRS])
def test_name_exists_with_a_compatible_signature(theirs_cls: type, ours_cls: type,
                                                 name: str) -> None:
    assert hasattr(ours_cls, name), f"{ours_cls.__name__}.{name} is missing"
    assert _kind(ours_cls, name) == _kind(theirs_cls, name)
    if _kind(theirs_cls, name) == "property":
        return
    theirs = list(inspect.signature(getattr(theirs_cls, name)).parameters.values())
    ours = list(inspect.signature(getattr(ours_cls, name)).parameters.values())
    assert [p.name for p in ours[:len(theirs)]] == [p.name for p in theirs], \
        f"{name}: parameters {[p.name for p in ours]} vs PySpark's {[p.name for p in theirs]}"
    for o, t in zip(ours, theirs, strict=False):
        assert o.kind == t.kind, f"{name}({t.name}): {o.kind} vs PySpark's {t.kind}"
        if t.default is not inspect.Parameter.empty:
            assert _same_default(o.default, t.default), \
                f"{name}({t.name}): default {o.default!r} vs PySpark's {t.default!r}"
        else:
            assert o.default is inspect.Parameter.empty, \
                f"{name}({t.name}) is required in PySpark, optional here"
    for extra in ours[len(theirs):]:
        assert extra.default is not inspect.Parameter.empty or extra.kind in (
            inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD), \
            f"{name}: extra parameter {extra.name} must be optional"


def test_receiver_stream_exists() -> None:
    params = list(inspect.signature(StreamingContext.receiverStream).parameters)
    assert params[:2] == ["self", "receiver"]


def test_kafka_utils_has_both_stream_kinds() -> None:
    assert isinstance(inspect.getattr_static(KafkaUtils, "createStream"), staticmethod)
    assert isinstance(inspect.getattr_static(KafkaUtils, "createDirectStream"), staticmethod)
    direct = list(inspect.signature(KafkaUtils.createDirectStream).parameters)
    assert direct[:3] == ["ssc", "topics", "kafkaParams"]
    receiver = list(inspect.signature(KafkaUtils.createStream).parameters)
    assert receiver[:4] == ["ssc", "bootstrapServers", "groupId", "topics"]


def test_streaming_listener_has_pyspark_callbacks() -> None:
    from pyspark.streaming.listener import StreamingListener as PyListener

    for name in public_names(PyListener):
        if name == "Java":
            continue
        assert hasattr(StreamingListener, name), name

"""The receivers a ``walstream`` source runs, built from its options."""

from __future__ import annotations

import importlib
from typing import Any

from walstream.receiver.receiver import Receiver
from walstream.structured.errors import SourceOptionError
from walstream.structured.options import SourceOptions


def _user_receiver(spec: str, args: Any) -> Receiver:
    module_name, _, class_name = spec.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise SourceOptionError(f"option 'receiver': cannot load {spec!r}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Receiver)):
        raise SourceOptionError(f"option 'receiver': {spec!r} is not a walstream Receiver "
                                "subclass")
    try:
        if isinstance(args, dict):
            return cls(**args)
        return cls(*(args or ()))
    except TypeError as exc:
        raise SourceOptionError(f"option 'receiver.args' do not fit {spec!r}: {exc}") from exc


def build_receivers(options: SourceOptions, bootstrap_servers: str) -> dict[int, Receiver]:
    """One receiver per stream id ``0 .. numReceivers-1``.

    A ``kafka`` source splits its topics between its receivers (each reads every
    partition of its topics), so it runs at most one receiver per topic."""
    n = options.num_receivers
    if options.source == "kafka":
        from walstream.receiver.kafka_receiver import KafkaReceiver

        if n > len(options.topics):
            raise SourceOptionError(
                f"source 'kafka' runs at most one receiver per topic: numReceivers={n} "
                f"for {len(options.topics)} topic(s)")
        return {i: KafkaReceiver(bootstrap_servers, options.group_id,
                                 {t: 1 for t in options.topics[i::n]},
                                 kafka_params=dict(options.kafka_settings))
                for i in range(n)}
    if options.source == "socket":
        from walstream.receiver.socket_receiver import SocketTextReceiver

        return {i: SocketTextReceiver(options.host, options.port) for i in range(n)}
    if options.source == "rate":
        from walstream.receiver.rate_receiver import RateGeneratorReceiver

        return {i: RateGeneratorReceiver(options.rows_per_second, seed=i) for i in range(n)}
    return {i: _user_receiver(options.receiver, options.receiver_args) for i in range(n)}

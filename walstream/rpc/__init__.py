"""walstream.rpc: the wire protocol between receivers and the driver's ReceiverTracker.

Both sides import it and it imports neither: it depends only on ``walstream``'s
codec and errors and on ``walstream.wal.handle``'s schema, so an executor that runs a
receiver loads no driver code (``tests/test_import_layers.py`` checks it).

* :mod:`walstream.rpc.schemas`  -- Avro schemas of the records both sides exchange
  (a source range, a received block's info).
* :mod:`walstream.rpc.messages` -- the service name, the message codecs and limits.
* :mod:`walstream.rpc.bounds`   -- the bounds check run on a body before it is decoded.
* :mod:`walstream.rpc.auth`     -- the endpoint's credentials, session tokens and the
  MACs of what the driver sends (what each side proves, and with which key).
* :mod:`walstream.rpc.errors`   -- :class:`~walstream.rpc.errors.RpcMessageError`.
"""

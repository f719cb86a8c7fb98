"""``walstream status [URL]``: a running driver's status page as terminal tables.

The driver's status server (``driver/ui/status_server.py``) writes ``status.json``
(its URL and pid) into its local checkpoint directory, or into
``$WALSTREAM_HOME`` without one, and removes it when it stops. Without a URL
this finds that file; with one it asks that driver. Either way it reads
``/api/status`` and prints what the page shows.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from walstream.errors import ConfigError

STATE_FILE = "status.json"


def find_url(directory: Path) -> str:
    """The URL a live driver left in ``directory``/status.json."""
    path = directory / STATE_FILE
    try:
        state = json.loads(path.read_text())
        url, pid = str(state["url"]), int(state["pid"])
    except FileNotFoundError:
        raise ConfigError(f"no running driver left {path} (give its URL, or --checkpoint "
                          "DIR for a checkpointed app)") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: not a driver's status file ({exc})") from None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise ConfigError(f"{path} names pid {pid}, which is not running (a driver "
                          "that died; the file is stale)") from None
    except PermissionError:
        pass  # alive, another user's
    return url


def fetch_status(url: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """``/api/status`` of the driver serving ``url`` (its page or any path under it)."""
    base = url if url.endswith("/") else url + "/"
    if base.endswith("/api/status/"):
        base = base[:-len("api/status/")]
    try:
        with urllib.request.urlopen(base + "api/status", timeout=timeout_s) as resp:
            data = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {base}api/status: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{base}api/status: not a status object")
    return data


def _table(head: list[str], rows: list[list[Any]]) -> str:
    if not rows:
        return "  (none)"
    cells = [head, *[[("-" if c is None else str(c)) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    lines = ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in cells]
    lines.insert(1, "  " + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _clock(ms: int | float | None) -> str:
    if not ms or ms < 0:
        return "-"
    return time.strftime("%H:%M:%S", time.localtime(ms / 1000))


def _sec(ms: int | None) -> str:
    return "-" if ms is None or ms < 0 else f"{ms / 1000:.3f}"


def format_status(s: dict[str, Any], batches: int = 10) -> str:
    """``s`` (an ``/api/status`` answer) as text: summary, then tables."""
    t, r = s.get("totals", {}), s.get("restart", {})
    out = [f"app {s.get('app_id')}  {s.get('url', '')}",
           f"uptime {s.get('uptime_seconds', 0):.0f} s; batches completed "
           f"{t.get('batches_completed', 0):.0f}, failed {t.get('batches_failed', 0):.0f}, "
           f"waiting or running {t.get('batches_unprocessed', 0)}; records processed "
           f"{t.get('records_processed', 0):.0f}"]
    if r.get("restarted"):
        first = r.get("first_batch_seconds")
        out.append(f"restarted: replayed {r.get('replayed_events', '?')} events in "
                   f"{r.get('replay_seconds')} s; first batch "
                   f"{'after ' + str(first) + ' s' if first is not None else 'not yet'}")
    out += ["", "Receivers", _table(
        ["stream", "name", "state", "host", "executor", "rate limit", "last error", "at"],
        [[x["stream"], x["name"], x["state"], x["host"], x["executor_id"],
          x["rate_limit"] or "none", x["last_error"][:60] or "",
          _clock((x["last_error_time"] or 0) * 1000) if x["last_error_time"] else ""]
         for x in s.get("receivers", [])])]
    last = list(reversed(s.get("batches", [])[-batches:]))
    out += ["", f"Batches (last {len(last)})", _table(
        ["time", "records", "scheduling s", "processing s", "total s", "status", "error"],
        [[_clock(b["time_ms"]), b["records"], _sec(b["scheduling_delay_ms"]),
          _sec(b["processing_delay_ms"]), _sec(b["total_delay_ms"]), b["status"],
          b["error"][:60]] for b in last])]
    out += ["", "Write-ahead logs", _table(
        ["log", "records", "bytes", "current topic", "clean threshold"],
        [[w["name"], w["records"], w["bytes"], w["last_topic"],
          _clock(w["clean_threshold_ms"])] for w in s.get("wal", [])])]
    out += ["", "Kafka lag", _table(
        ["topic", "partition", "lag"],
        [[x["topic"], x["partition"], x["lag"]] for x in s.get("kafka_lag", [])])]
    return "\n".join(out)

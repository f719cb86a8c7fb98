#!/usr/bin/env bash
# Checks what `make demo` / `make test` need on a fresh machine, one clear line per problem.
set -u
PYTHON="${1:-python3}"
fail=0
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "prerequisite missing: '$PYTHON' not found; install Python 3.11+ (or run: make PYTHON=/path/to/python3.11 ...)" >&2
  fail=1
elif ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
  echo "prerequisite wrong: $("$PYTHON" --version 2>&1) found at $(command -v "$PYTHON"); Python 3.11+ is required (make PYTHON=python3.11 ...)" >&2
  fail=1
elif ! "$PYTHON" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "prerequisite missing: Python's venv/ensurepip modules (Debian: apt-get install python3-venv)" >&2
  fail=1
fi
if ! command -v java >/dev/null 2>&1; then
  echo "prerequisite missing: java not found; install a Java 17+ runtime (Debian: apt-get install openjdk-17-jre-headless) for PySpark" >&2
  fail=1
else
  major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
  if [ -z "$major" ] || [ "$major" -lt 17 ]; then
    echo "prerequisite wrong: $(java -version 2>&1 | head -1); PySpark 4 needs Java 17+" >&2
    fail=1
  fi
fi
exit $fail

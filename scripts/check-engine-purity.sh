#!/usr/bin/env bash
# The engine is pure (DESIGN.md): no I/O crates in its normal dependency tree and no clock,
# file, network, process, environment or thread use in its sources.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=$(cargo tree -p wakterm-engine -e normal --prefix none --locked)
for crate in tokio madsim rusqlite portable-pty rand libc getrandom; do
  if echo "$tree" | grep -qE "^${crate} "; then
    echo "check-engine-purity: wakterm-engine depends on ${crate}" >&2
    exit 1
  fi
done
if grep -rnE 'std::fs|std::net|std::process|std::env|Instant::now|SystemTime::now|thread::spawn' engine/src; then
  echo "check-engine-purity: forbidden API in engine/src (see above)" >&2
  exit 1
fi
echo "check-engine-purity: engine dependency tree and sources are pure"

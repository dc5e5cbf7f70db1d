#!/usr/bin/env bash
# The whole test suite: rule-id coverage, the workspace tests (one shared target dir), and
# the engine's dependency/purity check. Run from anywhere: `bash scripts/test-all.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
# Snapshots are never written in CI or by this script: a missing or changed snapshot fails.
export INSTA_UPDATE=no
echo "== SPEC.md rule ids cited by tests"
bash scripts/check-spec-ids.sh
echo "== engine purity"
bash scripts/check-engine-purity.sh
echo "== cargo test (workspace)"
cargo test --workspace --locked 2>&1

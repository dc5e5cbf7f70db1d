#!/usr/bin/env bash
# Fails unless every rule id in SPEC.md's rule tables is unique and cited by at least one test: in a test
# file (any */tests/*.rs, tests/, sim/, a src/**/tests.rs module) or in a source file after its
# `#[cfg(test)]` line.
# An id is cited as `ADM-3` or as `adm_3_` in a test name.
set -euo pipefail
cd "$(dirname "$0")/.."
ids=$(grep -oE '^\| [A-Z]+-[0-9]+ \|' SPEC.md | tr -d '| ' | sort -u)
[ -n "$ids" ] || { echo "check-spec-ids: no rule ids found in SPEC.md" >&2; exit 1; }
# One rule, one id: a second row with an id already used makes every citation of it ambiguous
# (CORR-13 named two rules for a while).
dups=$(grep -oE '^\| [A-Z]+-[0-9]+ \|' SPEC.md | tr -d '| ' | sort | uniq -d)
if [ -n "$dups" ]; then
  echo "check-spec-ids: ids used by more than one rule in SPEC.md: $(echo $dups)" >&2
  exit 1
fi
corpus=$(mktemp)
trap 'rm -f "$corpus"' EXIT
find . -path ./target -prune -o -path ./.cache -prune -o -name '*.rs' -path '*/tests/*' -print0 | xargs -0 cat >>"$corpus"
# A `tests.rs` module file under src/ is only compiled under `#[cfg(test)] mod tests;`.
find . -path ./target -prune -o -path ./.cache -prune -o -name 'tests.rs' -path '*/src/*' -print0 | xargs -0 cat >>"$corpus"
find . -path ./target -prune -o -path ./.cache -prune -o -name '*.rs' -path '*/src/*' -print0 |
  xargs -0 awk 'FNR==1{t=0} /#\[cfg\(test\)\]/{t=1} t' >>"$corpus"
missing=0
count=0
for id in $ids; do
  count=$((count + 1))
  lower=$(echo "$id" | tr 'A-Z-' 'a-z_')
  if ! grep -qE "(${id}([^0-9]|$))|(${lower}_)" "$corpus"; then
    echo "check-spec-ids: $id is not cited by any test" >&2
    missing=$((missing + 1))
  fi
done
if [ "$missing" -gt 0 ]; then
  echo "check-spec-ids: $missing of $count rule ids uncited" >&2
  exit 1
fi
echo "check-spec-ids: all $count rule ids in SPEC.md are cited by tests"

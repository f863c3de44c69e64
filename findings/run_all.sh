#!/usr/bin/env bash
# Run every finding script of one engine both ways: unfixed it must exit 1 (reproduced), with --with-fix 0 (fixed).
#
#   bash findings/run_all.sh sglang
#   PYTHON=/tmp/dspark-contracts-vllm-venv/bin/python bash findings/run_all.sh vllm
#
# One line per script; exit status 1 if any expectation fails. A script run against an engine version it does not
# apply to exits 2: that counts as a failure unless ALLOW_NOT_AFFECTED=1 (then it is reported as SKIP).
# Scripts run one at a time. A failing run's output tail is printed below its line.
set -u

engine="${1:-}"
if [ -z "$engine" ] || [ ! -d "$(dirname "$0")/$engine" ]; then
    echo "usage: [PYTHON=...] bash findings/run_all.sh <sglang|vllm|deepspec>" >&2
    exit 2
fi
py="${PYTHON:-python}"
dir="$(cd "$(dirname "$0")/$engine" && pwd)"
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
failed=0
count=0

for script in "$dir"/[a-z]*.py; do
    [ -e "$script" ] || continue
    name="$(basename "$script" .py)"
    count=$((count + 1))
    "$py" "$script" >"$logs/$name.unfixed" 2>&1
    unfixed=$?
    "$py" "$script" --with-fix >"$logs/$name.fixed" 2>&1
    fixed=$?
    if [ "$unfixed" -eq 1 ] && [ "$fixed" -eq 0 ]; then
        echo "ok    $engine/$name: unfixed exit 1 (reproduced), --with-fix exit 0 (fixed)"
    elif [ "$unfixed" -eq 2 ] && [ "$fixed" -eq 2 ] && [ "${ALLOW_NOT_AFFECTED:-0}" = "1" ]; then
        echo "SKIP  $engine/$name: $(head -n 1 "$logs/$name.unfixed")"
    else
        echo "FAIL  $engine/$name: unfixed exit $unfixed (want 1), --with-fix exit $fixed (want 0)"
        for run in unfixed fixed; do
            echo "  --- $run: last lines ---"
            tail -n 15 "$logs/$name.$run" | sed 's/^/  | /'
        done
        failed=$((failed + 1))
    fi
done

if [ "$count" -eq 0 ]; then
    echo "FAIL  no finding scripts under $dir"
    exit 1
fi
echo "$engine: $((count - failed))/$count finding scripts as expected"
[ "$failed" -eq 0 ]

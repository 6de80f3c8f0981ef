#!/usr/bin/env bash
# The test suite (what CI runs): ruff and mypy, then unit, Parquet engine, table-format commits, index, dbt functional tests.
set -euo pipefail
source "$(dirname "$0")/setup_env.sh"
cd "$ROOT"
# the driver JVM's class-sharing archive, written beside lint and type check (tests/warm_class_cache.py says why)
python tests/warm_class_cache.py &
warm=$!
# lint and type check first: seconds, and a failure there stops before the slow tests
ruff check adapter/partialcow
mypy
wait "$warm" || echo "class cache: not warmed (the suite runs without the archive)"
# --durations: the slowest tests in every CI log, which is what the 25-minute budget is kept by
python -m pytest -n 2 --dist loadfile --durations=40 "$@"

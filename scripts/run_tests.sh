#!/usr/bin/env bash
# The test suite (what CI runs): ruff and mypy, then unit, Parquet engine, table-format commits, index, dbt functional tests.
set -euo pipefail
source "$(dirname "$0")/setup_env.sh"
cd "$ROOT"
# lint and type check first: seconds, and a failure there stops before the slow tests
ruff check adapter/partialcow
mypy
python -m pytest -n 2 --dist loadfile "$@"

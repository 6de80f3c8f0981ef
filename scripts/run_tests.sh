#!/usr/bin/env bash
# The test suite (what CI runs): unit, Parquet engine, table-format commits, index, dbt functional tests.
set -euo pipefail
source "$(dirname "$0")/setup_env.sh"
cd "$ROOT"
python -m pytest -n 2 --dist loadfile "$@"

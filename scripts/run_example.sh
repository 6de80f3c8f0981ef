#!/usr/bin/env bash
# Main job: `dbt build` of models_example on the embedded default (local Spark, Iceberg tables in ./models_example/warehouse).
set -euo pipefail
source "$(dirname "$0")/setup_env.sh"
cd "$ROOT"
dbt build --project-dir models_example --profiles-dir models_example "$@"

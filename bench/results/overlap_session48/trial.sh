#!/bin/bash
# usage: trial.sh <label> [env assignments...]; restores the table, runs one fresh dbt process, prints timings
label=$1; shift
W=/work/main/bench/work/dbt_sf1
rm -rf $W/warehouse_iceberg/bench.db/ours_iceberg $W/warehouse_iceberg/metastore_db
cp -a /tmp/exp48/ours_iceberg.bak $W/warehouse_iceberg/bench.db/ours_iceberg
cp -a /tmp/exp48/metastore_db.bak $W/warehouse_iceberg/metastore_db
cd /work/main && source .venv/bin/activate
export PYTHONPATH=${CODE:-/work/main/adapter} PARTIALCOW_CLASS_CACHE_DIR=$W/jvm_cache DBT_SEND_ANONYMOUS_USAGE_STATS=false PYTHONHASHSEED=0
L=/tmp/exp48/logs/$label.$$; mkdir -p $L
s=$(date +%s.%N)
env "$@" dbt run --select ours_iceberg --target iceberg --vars '{"batch": "/tmp/exp48/trial.parquet"}' --project-dir $W/project --profiles-dir $W/project --log-path $L --target-path /tmp/exp48/target_$label > $L/stdout.txt 2>&1
rc=$?
e=$(date +%s.%N)
model=$(python -c "import json;print(round(json.load(open('/tmp/exp48/target_$label/run_results.json'))['results'][0]['execution_time'],2))")
echo "$label rc=$rc process=$(python -c "print(round($e-$s,2))") model=$model $(grep -o 'partialcow phases: .*' $L/dbt.log | cut -c1-300)"

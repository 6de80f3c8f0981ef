"""Where each live customer's row is stored: the row index of ``customers`` queried from a Python model.

``partial_cow_incremental`` keeps a row index (key -> data file, row position) next to the table. A Python model
can use the same library the materialization uses, on the same SparkSession:

    from partialcow.index import RowIndex
    from partialcow.table.iceberg import IcebergTable
    index = RowIndex.open(IcebergTable(session, "shop.customers"))
    found = index.lookup(keys_df).found            # key columns + file + pos, without scanning the table

    from partialcow.spark.changes import ChangeSpec, apply_changes
    from partialcow.spark.tables import open_table
    metrics = apply_changes(session, open_table(session, "shop.customers", table_format="iceberg"), changes_df,
                            ChangeSpec(key_columns=("customer_id",), op_column="_op", sequence_column="_ts"))
    # metrics.rows_updated, metrics.pages_rewritten, metrics.pages_copied, ...

(apply_changes writes to a table directly: call it from a model that owns that table, or from a script.)
"""

from pyspark.sql import functions as F


def model(dbt, session):
    dbt.config(materialized="table")
    from partialcow.index import RowIndex
    from partialcow.table.iceberg import IcebergTable

    customers = dbt.ref("customers")  # also makes dbt build customers first
    index = RowIndex.open(IcebergTable(session, f"{dbt.this.schema}.customers"))
    index.ensure_fresh()  # a no-op unless someone else wrote the table since its last partial_cow_incremental run
    found = index.lookup(customers.select("customer_id"), file_column="data_file", pos_column="row_position").found
    return found.select(
        "customer_id", F.element_at(F.split("data_file", "/"), -1).alias("data_file"), "row_position"
    )

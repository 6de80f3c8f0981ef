"""Revenue per customer from live orders: a Python model running on the same embedded SparkSession."""

from pyspark.sql import functions as F


def model(dbt, session):
    dbt.config(materialized="table")
    customers = dbt.ref("customers")
    orders = dbt.ref("orders").where(~F.col("is_deleted") & (F.col("status") != "cancelled"))
    revenue = orders.groupBy("customer_id").agg(
        F.count("*").alias("order_count"), F.sum("amount").alias("revenue")
    )
    return (
        customers.join(revenue, "customer_id", "left")
        .select(
            "customer_id",
            "customer_name",
            F.coalesce("order_count", F.lit(0)).cast("bigint").alias("order_count"),
            F.coalesce("revenue", F.lit(0)).cast("decimal(14,2)").alias("revenue"),
        )
    )

-- Current customers, maintained in place by partial copy-on-write: the model's rows are the customers' change
-- events (_op I/U/D, ordered by _ts). Per customer the latest event wins: I and U upsert, D deletes. Only the
-- Parquet pages holding changed values are rewritten; the first run (or --full-refresh) builds the table.
{{ config(
    materialized='partial_cow_incremental',
    unique_key='customer_id',
    op_column='_op',
    sequence_column='_ts'
) }}
select customer_id, customer_name, email, country_code, _op, _ts
from {{ ref('stg_customer_changes') }}
{% if is_incremental() %}
-- only events the table has not seen (a delete newer than every stored row is applied again: a no-op)
where _ts > (select coalesce(max(_ts), timestamp'1970-01-01') from {{ this }})
{% endif %}

-- Current orders, built incrementally: each run merges the changes newer than what the table holds.
{{ config(
    materialized='incremental',
    incremental_strategy='merge',
    unique_key='order_id'
) }}
with changes as (
    select * from {{ ref('stg_order_changes') }}
    {% if is_incremental() %}
    where _ts > (select coalesce(max(updated_at), timestamp'1970-01-01') from {{ this }})
    {% endif %}
),
latest as (
    select *, row_number() over (partition by order_id order by _ts desc) as change_rank
    from changes
)
select order_id, customer_id, amount, status, _op = 'D' as is_deleted, _ts as updated_at
from latest
where change_rank = 1

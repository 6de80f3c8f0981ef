-- One row per change event of an order.
select
    cast(order_id as bigint) as order_id,
    cast(customer_id as bigint) as customer_id,
    cast(amount as decimal(12, 2)) as amount,
    lower(status) as status,
    upper(_op) as _op,
    cast(_ts as timestamp) as _ts
from {{ ref('raw_order_changes') }}

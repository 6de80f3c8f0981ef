-- Current customers: the latest change per customer wins; a latest 'D' removes the customer.
with ranked as (
    select
        *,
        row_number() over (partition by customer_id order by _ts desc) as change_rank
    from {{ ref('stg_customer_changes') }}
)
select customer_id, customer_name, email, country_code, _ts as updated_at
from ranked
where change_rank = 1 and _op <> 'D'

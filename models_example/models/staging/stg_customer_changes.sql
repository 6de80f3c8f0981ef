-- One row per change event of a customer, typed and trimmed.
select
    cast(customer_id as bigint) as customer_id,
    trim(name) as customer_name,
    lower(trim(email)) as email,
    upper(country) as country_code,
    upper(_op) as _op,
    cast(_ts as timestamp) as _ts
from {{ ref('raw_customer_changes') }}

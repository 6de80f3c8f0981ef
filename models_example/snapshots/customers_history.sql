-- Every version of every customer: a row's validity is closed (dbt_valid_to) when its name, email or country
-- changes, and a deleted customer gets a deletion record (dbt_is_deleted = 'True'). Written by partial
-- copy-on-write: a run re-encodes only the pages holding the closed versions' dbt_valid_to, appends the new
-- versions, and dbt's staging query joins only the customers whose values can have changed.
{% snapshot customers_history %}
{{ config(
    target_schema='shop',
    unique_key='customer_id',
    strategy='check',
    check_cols=['customer_name', 'email', 'country_code'],
    hard_deletes='new_record'
) }}
select customer_id, customer_name, email, country_code from {{ ref('customers') }}
{% endsnapshot %}

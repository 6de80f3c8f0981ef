{#- dbt's get_columns_in_relation macro returns Column objects. dbt-spark's spark__ version returns the raw rows of
    DESCRIBE EXTENDED (a table has more rows than columns, and none has a .name), so dbt's snapshot staging for
    hard_deletes='new_record' finds no snapshot column and writes deletion records of NULLs. The adapter's method
    parses those rows into columns. -#}
{% macro partialcow__get_columns_in_relation(relation) -%}
  {{ return(adapter.get_columns_in_relation(relation)) }}
{%- endmacro %}

{#- Seeds: dbt-spark's session cursor turns a null binding into the string 'None' and does not escape quotes, and
    Iceberg's strict store assignment then refuses the insert. We render each value as an escaped SQL literal
    (adapter.partialcow_sql_literal), so nulls stay null and every value is cast to its column type. -#}
{% macro partialcow__load_csv_rows(model, agate_table) %}
  {%- set column_override = model['config'].get('column_types', {}) -%}
  {%- set types = [] -%}
  {%- for col_name in agate_table.column_names -%}
    {%- do types.append(column_override.get(col_name, adapter.convert_type(agate_table, loop.index0))) -%}
  {%- endfor -%}
  {%- set statements = [] -%}
  {%- for chunk in agate_table.rows | batch(get_batch_size()) -%}
    {%- set sql -%}
      insert into {{ this.render() }} values
      {% for row in chunk -%}
        ({%- for value in row -%}
          cast({{ adapter.partialcow_sql_literal(value) }} as {{ types[loop.index0] }}){%- if not loop.last %}, {% endif -%}
        {%- endfor -%}){%- if not loop.last %},{% endif %}
      {% endfor %}
    {%- endset -%}
    {%- do adapter.add_query(sql, abridge_sql_log=True) -%}
    {%- if loop.first -%}{%- do statements.append(sql) -%}{%- endif -%}
  {%- endfor -%}
  {{ return(statements[0] if statements else '') }}
{% endmacro %}


{#- A seed is a plain table in the branch's overlay schema: loaded for a branch that does not exist, it became an
    object of no branch that then stopped `branch_create` of that name. Refused like the branch's models are. -#}
{% macro partialcow__create_csv_table(model, agate_table) %}
  {%- set branch = partialcow_active_branch() -%}
  {%- if branch is not none -%}
    {%- do adapter.partialcow_require_branch(branch, target.schema) -%}
  {%- endif -%}
  {{ return(spark__create_csv_table(model, agate_table)) }}
{% endmacro %}

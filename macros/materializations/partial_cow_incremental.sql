{#- partial_cow_incremental: the model's rows are CDC changes (op code, sequence); keys found in the row index are
    updated in place by rewriting only the Parquet pages that change, deletes remove rows, new keys are appended,
    all in one table-format commit. The work happens in adapter.partial_cow_apply (Python, typed).
    On a branch (Iceberg only) the batch is applied to the branch's view of the model instead and stored as the
    model's overlay (adapter.partialcow_branch_apply): diff, merge and conflicts see it like a keyed table model. -#}
{% materialization partial_cow_incremental, adapter='partialcow', supported_languages=['sql', 'python'] -%}

  {%- set language = model['language'] -%}
  {%- set branch = partialcow_active_branch() -%}
  {#-- on a branch the model's relation is what the branch shows (an image table or a view), never a table --#}
  {%- set target_relation = this.incorporate(type='table' if branch is none else 'view') -%}
  {%- set existing_relation = load_relation(this) -%}
  {%- set full_refresh_mode = should_full_refresh() -%}
  {%- set settings = partialcow_change_settings() -%}
  {%- do adapter.partialcow_check_change_settings(settings, model.name) -%}
  {#-- temporary views are the session's, shared by dbt's threads: two models of one alias in two schemas must
      not stage into one view --#}
  {%- set changes_view = this.schema ~ '__' ~ this.identifier ~ '__pcow_changes' -%}

  {{ run_hooks(pre_hooks, inside_transaction=False) }}
  {{ run_hooks(pre_hooks) }}

  {%- if branch is not none -%}
    {#-- before the model's SQL runs: Delta models refused, and `this` made to read what the branch shows --#}
    {%- do adapter.partialcow_branch_prepare(this, settings, branch, target.schema) -%}
  {%- elif existing_relation is not none and (existing_relation.type != 'table'
        or (full_refresh_mode and not partialcow_holds_format(existing_relation, settings.file_format))) -%}
    {#-- a full refresh rebuilds a table of another format (a dbt-spark Parquet table, say) as dbt-spark does: it is
        dropped first, since its files may live where the new table's go. Without --full-refresh a batch is refused
        (adapter.partial_cow_apply says how to rebuild) and the table stays as it is --#}
    {%- do adapter.drop_relation(existing_relation) -%}
    {%- set existing_relation = none -%}
  {%- endif -%}

  {#-- the model's rows (the changes): a SQL model's query goes to the adapter as it is (a temporary view of it
      would make Spark analyse it twice); on a branch, and for Python models, they are staged as a temporary view --#}
  {%- set changes_sql = compiled_code if language == 'sql' and branch is none else none -%}
  {%- if language == 'python' -%}
    {%- call statement('main', language='python') -%}
      {{ partialcow_py_stage_changes(compiled_code, changes_view) }}
    {%- endcall -%}
  {%- elif changes_sql is none -%}
    {%- call statement('stage_changes') -%}
      create or replace temporary view {{ adapter.quote(changes_view) }} as {{ compiled_code }}
    {%- endcall -%}
  {%- endif -%}

  {#-- an enforced contract holds for every batch, not only the first build: the table's columns are the model's
      minus the op column --#}
  {%- if config.get('contract').enforced -%}
    {{ get_assert_columns_equivalent(partialcow_contract_sql(changes_sql, changes_view, settings)) }}
  {%- endif -%}

  {%- if branch is none -%}
    {%- set create = existing_relation is none or full_refresh_mode -%}
    {%- set response = adapter.partial_cow_apply(target_relation, changes_view, settings, create,
                                                 changes_sql=changes_sql, model_name=model.name,
                                                 not_null_columns=partialcow_not_null_columns()) -%}
  {%- else -%}
    {#-- the batch applied to the branch's view of the model, stored as its overlay (the table is not written) --#}
    {%- set response = adapter.partialcow_branch_apply(this, changes_view, settings, branch, target.schema,
                                                        full_refresh_mode) -%}
  {%- endif -%}
  {%- do store_result('main', response=response) -%}
  {#-- an enforced contract's constraints, set as dbt-spark sets them (on Delta tables; dbt-spark skips Iceberg's),
      once, on the table a first build or full refresh created; every later batch is checked against them --#}
  {%- if branch is none and create -%}
    {%- do persist_constraints(target_relation, model) -%}
  {%- endif -%}

  {%- if changes_sql is none -%}
    {%- call statement('drop_changes_view') -%}
      drop view if exists {{ adapter.quote(changes_view) }}
    {%- endcall -%}
  {%- endif -%}

  {%- set should_revoke = should_revoke(existing_relation, full_refresh_mode=full_refresh_mode) -%}
  {%- do apply_grants(target_relation, config.get('grants'), should_revoke=should_revoke) -%}
  {%- do persist_docs(target_relation, model) -%}

  {#-- after grants and documentation, as dbt-spark's materializations run them: a hook's ALTER has the last word --#}
  {{ run_hooks(post_hooks) }}
  {{ run_hooks(post_hooks, inside_transaction=False) }}

  {{ return({'relations': [target_relation]}) }}

{%- endmaterialization %}


{#- Whether an existing table relation is of the model's file_format (pre_model_hook sets the profile's table_format
    on a model that sets none). -#}
{% macro partialcow_holds_format(relation, file_format) %}
  {{ return(relation.is_delta if file_format == 'delta' else relation.is_iceberg) }}
{% endmacro %}


{#- The columns the table gets from the model's rows (all but the op column), as a query for dbt's contract check. -#}
{% macro partialcow_contract_sql(changes_sql, changes_view, settings) %}
  {%- set source = changes_sql if changes_sql is not none else 'select * from ' ~ adapter.quote(changes_view) -%}
  {%- set kept = [] -%}
  {%- for column in get_column_schema_from_query(source) if column.name | lower != (settings.op_column or '') | lower -%}
    {%- do kept.append(adapter.quote(column.name)) -%}
  {%- endfor -%}
  {#-- on lines of their own: a model whose last line is a -- comment would swallow the closing parenthesis --#}
  {{ return('select ' ~ kept | join(', ') ~ ' from (\n' ~ source ~ '\n) as partialcow_contract') }}
{% endmacro %}


{#- The model config the Python side needs (checked there, before any SQL runs: model_settings in
    partialcow/dbt_adapter/materialization.py). Dispatched in the 'dbt' namespace (ours is an adapter package): a
    project overrides it by defining partialcow__partialcow_change_settings. -#}
{% macro partialcow_change_settings() %}
  {{ return(adapter.dispatch('partialcow_change_settings', 'dbt')()) }}
{% endmacro %}

{% macro partialcow__partialcow_change_settings() %}
  {{ return({
      'unique_key': config.get('unique_key'),
      'op_column': config.get('op_column'),
      'op_codes': config.get('op_codes'),
      'sequence_column': config.get('sequence_column'),
      'merge_update_columns': config.get('merge_update_columns'),
      'merge_exclude_columns': config.get('merge_exclude_columns'),
      'on_schema_change': config.get('on_schema_change'),
      'file_format': config.get('file_format'),
      'tblproperties': config.get('tblproperties'),
      'partition_by': config.get('partition_by'),
      'clustered_by': config.get('clustered_by'),
      'incremental_predicates': config.get('incremental_predicates'),
      'location_root': config.get('location_root'),
  }) }}
{% endmacro %}


{#- Python models: run the model in-process and register its DataFrame as the changes view. -#}
{% macro partialcow_py_stage_changes(compiled_code, changes_view) %}
{{ compiled_code }}
# --- Autogenerated dbt materialization code (dbt-partialcow). --- #
from partialcow.dbt_adapter.python_models import to_spark_dataframe
dbt = dbtObj(spark.table)
to_spark_dataframe(model(dbt, spark), spark, model_name="{{ model.name }}").createOrReplaceTempView("{{ changes_view }}")
{%- endmacro %}


{#- The columns an enforced contract declares not_null: a first build creates them NOT NULL (every other column is
    nullable, as dbt-spark's CREATE TABLE AS SELECT makes them). -#}
{% macro partialcow_not_null_columns() %}
  {%- set names = [] -%}
  {%- if config.get('contract').enforced -%}
    {%- for name, column in model.columns.items() -%}
      {%- for constraint in column.get('constraints', []) if constraint.type == 'not_null' -%}
        {%- do names.append(name) -%}
      {%- endfor -%}
    {%- endfor -%}
    {%- for constraint in model.get('constraints', []) if constraint.type == 'not_null' -%}
      {%- do names.extend(constraint.columns or []) -%}
    {%- endfor -%}
  {%- endif -%}
  {{ return(names) }}
{% endmacro %}

{#- dbt snapshots. A snapshot run is an upsert: the changed and deleted rows' current versions get their validity
    closed (dbt_valid_to), the new versions are inserted. On Iceberg and Delta tables that is done by partial
    copy-on-write (adapter.partialcow_snapshot_apply): only the pages holding the closed rows' dbt_valid_to are
    re-encoded, the new versions are appended, in one commit; the first run writes the table with our Parquet layout
    and row index (keyed by dbt_scd_id). dbt's own macros build the rows (strategies, staging query, hard_deletes),
    as dbt-spark's materialization does; snapshot_write='merge' takes dbt-spark's MERGE instead. Before dbt's
    staging query, partial_cow narrows a check or timestamp run to the records that can have changed (one join of
    keys and checked values, adapter.partialcow_snapshot_narrow): dbt's query then joins those only.

    dbt-spark stages an Iceberg snapshot in a permanent view in the current database (schema none); ours is a
    temporary view of the session, so nothing is left in the metastore and snapshots of the same name in two
    schemas do not meet. -#}
{% materialization snapshot, adapter='partialcow' %}

  {%- set target_table = model.get('alias', model.get('name')) -%}
  {%- set strategy_name = config.get('strategy') -%}
  {%- set unique_key = config.get('unique_key') -%}
  {%- set file_format = config.get('file_format') or 'iceberg' -%}
  {%- set grant_config = config.get('grants') -%}
  {%- set columns = config.get('snapshot_table_column_names') or get_snapshot_table_column_names() -%}

  {%- set branch = partialcow_active_branch() -%}
  {%- if branch is not none and not adapter.partialcow_is_branch_schema(model.schema, branch) -%}
    {#-- target_schema bypasses generate_schema_name: the base schema's snapshot would take the branch's rows --#}
    {%- do exceptions.raise_compiler_error(
        "Snapshot " ~ model.name ~ " writes " ~ model.schema ~ "." ~ target_table ~ ", outside branch " ~ branch
        ~ " (its target_schema is not moved to the branch): on the branch it would record the branch's rows in "
        ~ "that snapshot's history. Run it without a branch, or configure `schema` instead of `target_schema` "
        ~ "(the branch then snapshots into its own schema); nothing was written") -%}
  {%- endif -%}
  {%- set target_relation_exists, target_relation = get_or_create_relation(
          database=none, schema=model.schema, identifier=target_table, type='table') -%}
  {%- if target_relation_exists and target_relation.is_delta -%}
    {#-- an existing Delta table decides the format, as an Iceberg one does through its catalog --#}
    {%- set file_format = 'delta' -%}
  {%- endif -%}

  {%- if file_format not in ['iceberg', 'delta'] -%}
    {%- do exceptions.raise_compiler_error(
        "Invalid file_format '" ~ file_format ~ "' for snapshot " ~ model.name ~ ": accepted values are iceberg, delta") -%}
  {%- endif -%}
  {%- if target_relation_exists and (target_relation.is_iceberg or target_relation.is_delta) -%}
    {%- do adapter.partialcow_check_snapshot_format(target_relation, model.name) -%}
  {%- endif -%}
  {%- if target_relation_exists and not target_relation.is_iceberg and not target_relation.is_delta -%}
    {%- do exceptions.raise_compiler_error(
        "The existing table " ~ model.schema ~ "." ~ target_table ~ " of snapshot " ~ model.name
        ~ " is neither an Iceberg nor a Delta table: drop it, or snapshot into another table") -%}
  {%- endif -%}
  {%- if not adapter.check_schema_exists(model.database, model.schema) -%}
    {%- do create_schema(model.schema) -%}
  {%- endif -%}
  {%- if not target_relation.is_table -%}
    {%- do exceptions.relation_wrong_type(target_relation, 'table') -%}
  {%- endif -%}

  {{ run_hooks(pre_hooks, inside_transaction=False) }}
  {{ run_hooks(pre_hooks, inside_transaction=True) }}

  {%- set strategy_macro = strategy_dispatch(strategy_name) -%}
  {%- set strategy = strategy_macro(model, "snapshotted_data", "source_data", model['config'], target_relation_exists) -%}
  {#-- snapshot_write: partial_cow (the default) or merge (dbt-spark's MERGE) --#}
  {%- set snapshot_write = config.get('snapshot_write') or 'partial_cow' -%}
  {%- if snapshot_write not in ['partial_cow', 'merge'] -%}
    {%- do exceptions.raise_compiler_error(
        "Invalid snapshot_write '" ~ snapshot_write ~ "' for snapshot " ~ model.name
        ~ ": accepted values are partial_cow and merge") -%}
  {%- endif -%}
  {%- set partial_cow = snapshot_write == 'partial_cow' -%}
  {%- if partial_cow and target_relation_exists and adapter.partialcow_create_pending(target_relation) -%}
    {#-- its first run died before the first commit: build it again --#}
    {%- set target_relation_exists = false -%}
  {%- endif -%}

  {%- if not target_relation_exists -%}

    {%- set build_sql = build_snapshot_table(strategy, model['compiled_code']) -%}
    {{ check_time_data_types(build_sql) }}
    {%- if partial_cow -%}
      {%- set response = adapter.partialcow_snapshot_create(target_relation, build_sql, columns, file_format,
                                                                  strategy=strategy, source_sql=sql,
                                                                  config=model['config']) -%}
      {%- do store_result('main', response=response) -%}
    {%- else -%}
      {%- call statement('main') -%}
        {{ create_table_as(False, target_relation, build_sql) }}
      {%- endcall -%}
    {%- endif -%}

  {%- else -%}

    {{ adapter.assert_valid_snapshot_target_given_strategy(target_relation, columns, strategy) }}
    {%- set view_prefix = model.schema ~ '__' ~ target_table ~ '__pcow_snapshot' -%}
    {%- set narrow_views = {'keys': view_prefix ~ '_keys', 'source': view_prefix ~ '_source',
                            'target': view_prefix ~ '_current', 'files': view_prefix ~ '_files'} -%}
    {#-- the narrowing applies dbt's own change test of the strategy: not to a project's override of the strategy
        or of the staging query, which may version other records --#}
    {%- set staging_macro = adapter.dispatch('snapshot_staging_table', 'dbt') -%}
    {%- set narrowed_strategy = strategy_name if strategy_macro.macro.package_name == 'dbt'
          and staging_macro.macro.package_name == 'dbt' else "a project's own " ~ strategy_name -%}
    {%- if partial_cow and adapter.partialcow_snapshot_narrow(target_relation, sql, narrowed_strategy, strategy,
                                                              config, columns, narrow_views, file_format) -%}
      {#-- dbt's staging query over the records that can have changed only (snapshot_narrow.py) --#}
      {%- set staging_sql = snapshot_staging_table(
            strategy, 'select * from ' ~ narrow_views.source,
            api.Relation.create(identifier=narrow_views.target, schema=none, database=none, type='view')) -%}
    {%- else -%}
      {%- set narrow_views = {} -%}
      {%- set staging_sql = snapshot_staging_table(strategy, sql, target_relation) -%}
    {%- endif -%}
    {{ check_time_data_types(staging_sql) }}
    {%- set staging_table = api.Relation.create(
          identifier=model.schema ~ '__' ~ target_table ~ '__pcow_snapshot', schema=none, database=none, type='view') -%}
    {%- call statement('build_snapshot_staging_relation') -%}
      create or replace temporary view {{ staging_table }} as {{ staging_sql }}
    {%- endcall -%}

    {%- set remove_columns = ['dbt_change_type', 'DBT_CHANGE_TYPE', 'dbt_unique_key', 'DBT_UNIQUE_KEY'] -%}
    {%- if unique_key | is_list -%}
      {%- for key in strategy.unique_key -%}
        {%- do remove_columns.append('dbt_unique_key_' + loop.index|string) -%}
        {%- do remove_columns.append('DBT_UNIQUE_KEY_' + loop.index|string) -%}
      {%- endfor -%}
    {%- endif -%}
    {%- set missing_columns = adapter.get_missing_columns(staging_table, target_relation)
                                 | rejectattr('name', 'in', remove_columns) | list -%}
    {%- do create_columns(target_relation, missing_columns) -%}

    {%- if partial_cow -%}
      {%- set response = adapter.partialcow_snapshot_apply(
            target_relation, staging_table.identifier, columns, file_format, strategy=strategy,
            versions_view=narrow_views.get('target'), source_sql=sql) -%}
      {%- do store_result('main', response=response) -%}
    {%- else -%}
      {%- set source_columns = adapter.get_columns_in_relation(staging_table)
                                   | rejectattr('name', 'in', remove_columns) | list -%}
      {%- set quoted_source_columns = [] -%}
      {%- for column in source_columns -%}
        {%- do quoted_source_columns.append(adapter.quote(column.name)) -%}
      {%- endfor -%}
      {%- call statement('main') -%}
        {{ snapshot_merge_sql(target=target_relation, source=staging_table,
                              insert_cols=quoted_source_columns) }}
      {%- endcall -%}
    {%- endif -%}

  {%- endif -%}

  {%- set should_revoke = should_revoke(target_relation_exists, full_refresh_mode=False) -%}
  {%- do apply_grants(target_relation, grant_config, should_revoke) -%}
  {%- do persist_docs(target_relation, model) -%}

  {{ run_hooks(post_hooks, inside_transaction=True) }}
  {{ adapter.commit() }}

  {%- if staging_table is defined -%}
    {%- call statement('drop_snapshot_staging_relation') -%}
      drop view if exists {{ staging_table }}
    {%- endcall -%}
    {%- for view in narrow_views.values() -%}
      {%- call statement('drop_snapshot_narrowing_view') -%}
        drop view if exists {{ view }}
      {%- endcall -%}
    {%- endfor -%}
  {%- endif -%}

  {{ run_hooks(post_hooks, inside_transaction=False) }}

  {{ return({'relations': [target_relation]}) }}

{%- endmaterialization %}

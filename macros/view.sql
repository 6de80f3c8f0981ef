{#- Through Iceberg's SparkSessionCatalog, CREATE OR REPLACE VIEW over an existing Iceberg view keeps the old SQL
    in the Hive metastore (apache/iceberg#15490), so a changed view model would silently read its old definition.
    Drop it first, once the new definition is known to be good: dbt-spark's statement is rendered first (it checks
    an enforced contract then) and Spark analyses the query (limit 0: no job), so an edit Spark refuses fails while
    the old view still stands. The window where the view is absent is then one statement long. -#}
{% macro partialcow__create_view_as(relation, sql) -%}
  {%- set create = spark__create_view_as(relation, sql) -%}
  {%- do run_query("select * from (\n" ~ sql ~ "\n) as partialcow_view_check limit 0") -%}
  {#-- on a branch, a model that was a table there holds rows (its overlay) that diff and merge would still see --#}
  {%- set branch = partialcow_active_branch() -%}
  {%- if branch is not none and (model or {}).get('resource_type') == 'model'
        and relation.schema == this.schema and relation.identifier == this.identifier -%}
    {%- do adapter.partialcow_branch_forget(relation, branch, target.schema) -%}
  {%- endif -%}
  {%- do run_query("drop view if exists " ~ relation) -%}
  {%- do adapter.partialcow_drop_leftover_view(relation) -%}
  {{ create }}
{%- endmacro %}

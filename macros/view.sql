{#- Through Iceberg's SparkSessionCatalog, CREATE OR REPLACE VIEW over an existing Iceberg view keeps the old SQL
    in the Hive metastore (apache/iceberg#15490), so a changed view model would silently read its old definition.
    Drop it first; the window where the view is absent is one statement long. -#}
{% macro partialcow__create_view_as(relation, sql) -%}
  {%- do run_query("drop view if exists " ~ relation) -%}
  {{ spark__create_view_as(relation, sql) }}
{%- endmacro %}

{#- Branch environments: which branch a run builds, where its models go, what ref() reads.

    Select a branch with `--vars '{branch: dev}'` or the environment variable DBT_PARTIALCOW_BRANCH
    (the var wins; `main` or empty means no branch). Without one, nothing below changes dbt's behaviour.
    On branch `dev`, a model of schema `shop` is built into the overlay schema `shop__br_dev`: table and
    incremental models as an overlay table `<model>__pcow_overlay` (rows differing from the parent by
    unique_key) plus `<model>`, what readers query: a view, or the model's image table (a read-only Iceberg table
    dbt sees as a view); views and seeds as usual, in the overlay schema.
    partial_cow_incremental models apply their batch to what the branch shows (see the materialization) and
    store the result as the same overlay.
    ref() reads the branch's view when the model was built on the branch, else the nearest ancestor's.
    A project's own generate_schema_name or ref macro takes precedence over these and disables branching. -#}

{% macro partialcow_active_branch() -%}
  {%- set selected = var('branch', none) -%}
  {%- if selected is none -%}
    {%- set selected = env_var('DBT_PARTIALCOW_BRANCH', '') -%}
  {%- endif -%}
  {{ return(adapter.partialcow_branch_name(selected)) }}
{%- endmacro %}


{#- is_incremental() of a partial_cow_incremental model on a branch: the model exists on the branch or on a parent
    level (its relation on the branch is an image table or a view, never a table). None: not that case. -#}
{% macro partialcow_branch_is_incremental() -%}
  {%- set branch = partialcow_active_branch() -%}
  {%- if branch is none or model.config.materialized != 'partial_cow_incremental' -%}
    {{ return(none) }}
  {%- endif -%}
  {{ return(not should_full_refresh() and adapter.partialcow_branch_has_model(this, branch, target.schema)) }}
{%- endmacro %}


{% macro partialcow__generate_schema_name(custom_schema_name, node) -%}
  {%- set base_schema = default__generate_schema_name(custom_schema_name, node) | trim -%}
  {%- set branch = partialcow_active_branch() -%}
  {%- if branch is none -%}
    {{ base_schema }}
  {%- else -%}
    {{ adapter.partialcow_overlay_schema(base_schema, branch) }}
  {%- endif -%}
{%- endmacro %}


{#- dbt lets the adapter's package override ref(); builtins.ref still records the dependency. -#}
{% macro ref() -%}
  {%- set relation = builtins.ref(*varargs, **kwargs) -%}
  {%- if execute -%}
    {%- set branch = partialcow_active_branch() -%}
    {%- if branch is not none -%}
      {%- set relation = adapter.partialcow_branch_resolve(relation, branch, target.schema) -%}
    {%- endif -%}
  {%- endif -%}
  {{ return(relation) }}
{%- endmacro %}


{#- Every materialization builds its table through create_table_as: on a branch, building the model's own
    relation becomes an overlay build (table and incremental models alike: on a branch `this` is a view, so
    is_incremental() is false and the model's full result is diffed against the parent). -#}
{% macro create_table_as(temporary, relation, compiled_code, language='sql') -%}
  {%- set branch = none if temporary else partialcow_active_branch() -%}
  {%- if branch is not none and (model or {}).get('resource_type') == 'model'
        and relation.schema == this.schema and relation.identifier == this.identifier -%}
    {{ partialcow_branch_build_sql(branch, relation, compiled_code, language) }}
  {%- elif language == 'sql' -%}
    {{ adapter.dispatch('create_table_as', 'dbt')(temporary, relation, compiled_code) }}
  {%- else -%}
    {{ adapter.dispatch('create_table_as', 'dbt')(temporary, relation, compiled_code, language) }}
  {%- endif -%}
{%- endmacro %}


{% macro partialcow_branch_build_sql(branch, relation, compiled_code, language) -%}
  {%- set unique_key = config.get('unique_key', none) -%}
  {%- set file_format = config.get('file_format', none) -%}
  {%- if language == 'python' -%}
    {%- set spec = {'schema': relation.schema, 'identifier': relation.identifier, 'unique_key': unique_key,
                    'branch': branch, 'meta_schema': target.schema, 'file_format': file_format,
                    'materialized': config.get('materialized')} -%}
{{ compiled_code }}
# --- dbt-partialcow: build on branch {{ branch }} --- #
from partialcow.dbt_adapter.branching import build_python_model_on_branch
from partialcow.dbt_adapter.python_models import to_spark_dataframe
dbt = dbtObj(spark.table)
df = to_spark_dataframe(model(dbt, spark), spark, model_name={{ tojson(model.name) }})
print(build_python_model_on_branch(spark, df, {{ tojson(tojson(spec)) }}))
  {%- else -%}
    {%- set summary = adapter.partialcow_branch_build(relation, compiled_code, unique_key, branch, target.schema,
                                                     file_format, config.get('materialized')) -%}
    {%- do log(summary, info=True) -%}
    {#- the overlay and the view exist now; the materialization's `main` statement runs this no-op -#}
    select {{ "'" ~ (summary | replace("'", "")) ~ "'" }} as partialcow_branch_build
  {%- endif -%}
{%- endmacro %}


{#- On a branch, a model's relation dbt lists as a view may be its image table (a read-only Iceberg table over the
    branch's image, sharing the root table's files): it is unregistered, never dropped with its files. -#}
{% macro partialcow__drop_relation(relation) -%}
  {%- if relation.type != 'view' or not adapter.partialcow_drop_branch_reader(relation) -%}
    {%- if relation.type == 'table' -%}
      {%- do adapter.partialcow_refuse_iceberg_folder(relation) -%}
    {%- endif -%}
    {{ spark__drop_relation(relation) }}
    {%- if relation.type == 'view' -%}
      {%- do adapter.partialcow_drop_leftover_view(relation) -%}
    {%- endif -%}
  {%- endif -%}
{%- endmacro %}


{#- On a branch a model's relation is a view or a read-only image table (see the drop above): column comments are
    not written to it (ALTER TABLE on a view fails after the overlay was written; on an image table it would commit
    to what nothing may write). The documentation lands on the parent's table when the model is built there. -#}
{% macro partialcow__persist_docs(relation, model, for_relation, for_columns) -%}
  {%- set branch = partialcow_active_branch() -%}
  {%- if branch is not none and relation.schema and adapter.partialcow_is_branch_schema(relation.schema, branch) -%}
    {{ return(none) }}
  {%- endif -%}
  {{ spark__persist_docs(relation, model, for_relation, for_columns) }}
  {#-- dbt-spark writes a table's comment in CREATE TABLE AS SELECT, which our writes do not run --#}
  {%- if for_relation and config.persist_relation_docs() and model.description and relation.type == 'table' -%}
    {%- do adapter.partialcow_table_comment(relation, model.description) -%}
  {%- endif -%}
{%- endmacro %}

{#- dbt's is_incremental() only knows materialized='incremental'; ours are incremental too. -#}
{% macro is_incremental() %}
    {% if not execute %}
        {{ return(False) }}
    {% elif this is none %}
        {#-- dbt requires a unit test of an incremental model to override is_incremental, but finds that out by
             looking for dbt's own macro, which this one replaces: without the override `this` is unset here --#}
        {{ exceptions.raise_compiler_error(
            "is_incremental() has no model relation (`this`) here: unit test '" ~ (model.name if model else '')
            ~ "' of an incremental model must set `overrides: {macros: {is_incremental: true}}` (with a `this` "
            ~ "input) or `false`, as dbt requires") }}
    {% else %}
        {% set on_branch = partialcow_branch_is_incremental() %}
        {% if on_branch is not none %}
            {{ return(on_branch) }}
        {% endif %}
        {% set relation = adapter.get_relation(this.database, this.schema, this.table) %}
        {#-- a Delta table whose first build died before its commit is built again: not incremental --#}
        {{ return(relation is not none
                  and relation.type == 'table'
                  and model.config.materialized in ['incremental', 'partial_cow_incremental']
                  and not should_full_refresh()
                  and not adapter.partialcow_create_pending(relation)) }}
    {% endif %}
{% endmacro %}

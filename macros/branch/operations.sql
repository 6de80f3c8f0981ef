{#- Branch operations, run as `dbt run-operation <name> --args '{...}'`. Each logs a summary.

    branch_create       {name, parent?,       new branch (parent: the selected branch, else main); copies nothing.
                         image_mode?}         image_mode: copy-on-write (default: branch reads as fast as the
                                              table's; builds copy the data files they touch) or merge-on-read
                                              (builds store position deletes; reads apply them)
    branch_diff         {name}                per model inserted/updated/deleted keys and changed columns, also
                                              written to <target schema>__br_<name>.partialcow_branch_diff
    branch_merge        {name, on_conflict?}  three-way merge into the parent; conflicts go to
                                              <target schema>__br_<name>.partialcow_merge_conflicts and nothing
                                              is applied (on_conflict: fail, the default), unless on_conflict is
                                              ours (the branch's rows win) or theirs (the parent's rows stay)
    branch_drop         {name}                drops the overlay schemas and the branch's metadata (only this
                                              target's: those of its models and of the branch's record)
    branch_list         {}                    branches, parents, age, overlay rows/tombstones/ratio per model
    branch_materialize  {name, models?}       collapses the branch's models into full tables of what it shows
    branch_refresh      {name}                re-pins the branch's model views to their parents as they are now
    Branch metadata lives in <target schema>.partialcow_branches (Iceberg). The arguments are checked in Python
    (partialcow.branch.options): an unknown one is refused with the accepted ones listed.
    Each operation dispatches to partialcow__<operation>: define that macro in your project to override it
    (dispatch namespace 'dbt': adapter plugin packages cannot be dispatch namespaces of their own). -#}

{% macro partialcow_branch_graph_models() -%}
  {%- set found = [] -%}
  {%- for node in graph.nodes.values() if node.resource_type in ['model', 'seed', 'snapshot'] -%}
    {%- do found.append([node.schema, node.alias or node.name]) -%}
  {%- endfor -%}
  {{ return(found) }}
{%- endmacro %}


{% macro partialcow_branch_run(operation, options) -%}
  {%- set summary = adapter.partialcow_branch_operation(operation, options, target.schema) -%}
  {%- do log(summary, info=True) -%}
  {{ return(summary) }}
{%- endmacro %}


{% macro branch_create(name, parent=none, image_mode=none) -%}
  {{ return(adapter.dispatch('branch_create', 'dbt')(name, parent, image_mode)) }}
{%- endmacro %}

{% macro partialcow__branch_create(name, parent, image_mode) -%}
  {%- set options = {'name': name, 'parent': parent or partialcow_active_branch() or 'main',
                     'models': partialcow_branch_graph_models(), 'image_mode': image_mode} -%}
  {{ return(partialcow_branch_run('create', options)) }}
{%- endmacro %}


{% macro branch_diff(name) -%}
  {{ return(adapter.dispatch('branch_diff', 'dbt')(name)) }}
{%- endmacro %}

{% macro partialcow__branch_diff(name) -%}
  {{ return(partialcow_branch_run('diff', {'name': name})) }}
{%- endmacro %}


{% macro branch_merge(name, on_conflict=none) -%}
  {{ return(adapter.dispatch('branch_merge', 'dbt')(name, on_conflict)) }}
{%- endmacro %}

{% macro partialcow__branch_merge(name, on_conflict) -%}
  {%- set options = {'name': name, 'on_conflict': on_conflict, 'models': partialcow_branch_graph_models()} -%}
  {{ return(partialcow_branch_run('merge', options)) }}
{%- endmacro %}


{% macro branch_drop(name) -%}
  {{ return(adapter.dispatch('branch_drop', 'dbt')(name)) }}
{%- endmacro %}

{% macro partialcow__branch_drop(name) -%}
  {{ return(partialcow_branch_run('drop', {'name': name, 'models': partialcow_branch_graph_models()})) }}
{%- endmacro %}


{% macro branch_list() -%}
  {{ return(adapter.dispatch('branch_list', 'dbt')()) }}
{%- endmacro %}

{% macro partialcow__branch_list() -%}
  {{ return(partialcow_branch_run('list', {})) }}
{%- endmacro %}


{% macro branch_materialize(name, models=none) -%}
  {{ return(adapter.dispatch('branch_materialize', 'dbt')(name, models)) }}
{%- endmacro %}

{% macro partialcow__branch_materialize(name, models) -%}
  {%- set selected = [models] if models is string else models -%}
  {{ return(partialcow_branch_run('materialize', {'name': name, 'models': selected})) }}
{%- endmacro %}


{% macro branch_refresh(name) -%}
  {{ return(adapter.dispatch('branch_refresh', 'dbt')(name)) }}
{%- endmacro %}

{% macro partialcow__branch_refresh(name) -%}
  {{ return(partialcow_branch_run('refresh', {'name': name})) }}
{%- endmacro %}

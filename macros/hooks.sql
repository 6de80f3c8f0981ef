{#- dbt's run_hooks without the `commit;` it sends before hooks that run outside the transaction (before_begin,
    after_commit): Spark SQL has no transactions and refuses COMMIT, so every such hook failed its model or snapshot.
    The hooks themselves run as dbt runs them. -#}
{% macro run_hooks(hooks, inside_transaction=True) %}
  {% for hook in hooks | selectattr('transaction', 'equalto', inside_transaction) %}
    {% set rendered = render(hook.get('sql')) | trim %}
    {% if (rendered | length) > 0 %}
      {% call statement(auto_begin=inside_transaction) %}
        {{ rendered }}
      {% endcall %}
    {% endif %}
  {% endfor %}
{% endmacro %}

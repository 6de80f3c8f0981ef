from partialcow import __version__ as version  # dbt reads dbt.adapters.<type>.__version__.version  # noqa: F401

"""dbt_adapter"""

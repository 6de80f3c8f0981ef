"""parquet"""

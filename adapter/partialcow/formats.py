"""The table formats partialcow writes, declared once for every layer (a shared leaf: it imports nothing of ours).

>>> TABLE_FORMATS
('iceberg', 'delta')
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["TABLE_FORMATS", "TableFormat"]

TableFormat = Literal["iceberg", "delta"]
TABLE_FORMATS: tuple[TableFormat, ...] = get_args(TableFormat)

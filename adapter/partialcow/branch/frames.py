"""Small DataFrame helpers the branch modules share."""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING

from partialcow.branch.naming import quote

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["all_of", "key_string"]


def all_of(conditions: Sequence[Column]) -> Column:
    """The conjunction of ``conditions`` (true for none)."""
    from pyspark.sql import functions as F

    return functools.reduce(operator.and_, conditions) if conditions else F.lit(True)


def key_string(keys: Sequence[str], prefix: str) -> Column:
    """One readable string per key: the value itself, or JSON for composite keys (``prefix``: a column qualifier
    such as ``"o."``)."""
    from pyspark.sql import functions as F

    if len(keys) == 1:
        return F.col(f"{prefix}{quote(keys[0])}").cast("string")
    return F.to_json(F.struct(*[F.col(f"{prefix}{quote(k)}").alias(k) for k in keys]))

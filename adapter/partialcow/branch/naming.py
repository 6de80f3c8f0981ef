"""Branch names and the names of everything a branch stores.

A branch ``dev`` of a model ``orders`` that lives in schema ``shop`` keeps:

- ``shop__br_dev.orders``: what users and ``ref()`` read (branch rows over the parent's): a view, or, when the model
  has an image, a read-only Iceberg table over it (marked by the table property ``partialcow.image-of``),
- ``shop__br_dev.orders__pcow_overlay``: the overlay table (changed rows as ``'U'``, deleted keys as ``'D'``),
- ``shop__br_dev.orders__pcow_base``: for every key in the overlay, the parent's row at the merge base (captured
  when the key enters the overlay; the three-way merge reads it, so it survives a parent table being replaced),
- ``shop__br_dev.orders__pcow_full``: only after ``branch_materialize``, the collapsed full table.

Names are validated against an allowlist, so they never need escaping inside backtick quotes.
"""

from __future__ import annotations

import re

from partialcow.exceptions import BranchError

__all__ = [
    "IMAGE_OF_PROPERTY",
    "MAIN",
    "METADATA_TABLE",
    "OP_COLUMN",
    "OP_DELETE",
    "OP_UPSERT",
    "OVERLAY_SUFFIX",
    "SEQ_COLUMN",
    "base_image_table",
    "base_schema_of",
    "full_table",
    "model_of_overlay",
    "overlay_schema",
    "overlay_table",
    "qualified",
    "quote",
    "validate_branch_name",
]

#: The implicit root: the tables dbt builds without a branch.
MAIN = "main"
OP_COLUMN = "_pcow_op"
SEQ_COLUMN = "_pcow_seq"
OP_UPSERT = "U"
OP_DELETE = "D"
#: Table (in the target schema) holding one row per branch.
METADATA_TABLE = "partialcow_branches"
# Table property of a branch's image table (what readers of an imaged model query): the root table and ref it reads.
IMAGE_OF_PROPERTY = "partialcow.image-of"

_BRANCH_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_SUFFIX = "__br_"
_OVERLAY_SCHEMA_RE = re.compile(r"^(?P<base>.+)__br_(?P<branch>[a-z][a-z0-9_]{0,39})$")
_IDENTIFIER_RE = re.compile(r"^[A-Za-z0-9_]+$")


def validate_branch_name(name: object, *, allow_main: bool = False) -> str:
    """Return ``name`` if it is a valid branch name, else raise :class:`BranchError` naming it.

    >>> validate_branch_name("feature_1")
    'feature_1'
    >>> validate_branch_name("Dev")
    Traceback (most recent call last):
    ...
    partialcow.exceptions.BranchError: invalid branch name 'Dev': use 1-40 characters of a-z, 0-9 and _, starting with a letter, without '__' (for example 'dev' or 'feature_1')
    """  # noqa: E501 - a doctest output line cannot wrap
    # "__" separates the parts of generated names (shop__br_dev, orders__pcow_overlay): not inside a branch name
    if not isinstance(name, str) or not _BRANCH_RE.match(name) or "__" in name:
        raise BranchError(
            f"invalid branch name {name!r}: use 1-40 characters of a-z, 0-9 and _, starting with a letter, "
            "without '__' (for example 'dev' or 'feature_1')"
        )
    if name == MAIN and not allow_main:
        raise BranchError("'main' names the tables built without a branch: choose another branch name")
    return name


def _identifier(name: str, what: str) -> str:
    # Schema and table names we generate SQL for: plain identifiers only (no backticks, dots or spaces).
    if not _IDENTIFIER_RE.match(name):
        raise BranchError(f"{what} {name!r} cannot be branched: only letters, digits and _ are supported")
    return name


def overlay_schema(base_schema: str, branch: str) -> str:
    """The schema holding ``branch``'s objects for models of ``base_schema`` (``main`` is the base schema itself).

    >>> overlay_schema("shop", "dev"), overlay_schema("shop", "main")
    ('shop__br_dev', 'shop')
    """
    _identifier(base_schema, "schema")
    if branch == MAIN:
        return base_schema
    return f"{base_schema}{_SUFFIX}{validate_branch_name(branch)}"


def base_schema_of(schema: str) -> str:
    """The base schema of ``schema`` (itself unless it is an overlay schema).

    >>> base_schema_of("shop__br_dev"), base_schema_of("shop")
    ('shop', 'shop')
    """
    match = _OVERLAY_SCHEMA_RE.match(schema)
    return match.group("base") if match else schema


OVERLAY_SUFFIX = "__pcow_overlay"


def overlay_table(identifier: str) -> str:
    """Name of the overlay table of model ``identifier`` (inside the overlay schema).

    >>> overlay_table("orders")
    'orders__pcow_overlay'
    """
    return f"{_identifier(identifier, 'model')}{OVERLAY_SUFFIX}"


def model_of_overlay(table: str) -> str | None:
    """The model whose overlay table ``table`` is, None for another table.

    >>> model_of_overlay("orders__pcow_overlay"), model_of_overlay("orders")
    ('orders', None)
    """
    return table[: -len(OVERLAY_SUFFIX)] if table.endswith(OVERLAY_SUFFIX) and len(table) > len(OVERLAY_SUFFIX) \
        else None


def model_of_table(table: str) -> str:
    """The model a table of an overlay schema belongs to: its overlay's, its full table's, else the table's own.

    >>> model_of_table("orders__pcow_overlay"), model_of_table("orders__pcow_full"), model_of_table("orders")
    ('orders', 'orders', 'orders')
    """
    for suffix in (OVERLAY_SUFFIX, FULL_SUFFIX):
        if table.endswith(suffix) and len(table) > len(suffix):
            return table[: -len(suffix)]
    return table


FULL_SUFFIX = "__pcow_full"


def full_table(identifier: str) -> str:
    """Name of the collapsed full table ``branch_materialize`` writes for model ``identifier``.

    >>> full_table("orders")
    'orders__pcow_full'
    """
    return f"{_identifier(identifier, 'model')}{FULL_SUFFIX}"


def base_image_table(identifier: str) -> str:
    """Name of the table keeping, per key the branch changed, the parent's row at the merge base.

    >>> base_image_table("orders")
    'orders__pcow_base'
    """
    return f"{_identifier(identifier, 'model')}__pcow_base"


def quote(name: str) -> str:
    """Backtick-quote one identifier, escaping embedded backticks (Spark SQL doubles them).

    >>> quote("a`b")
    '`a``b`'
    """
    return "`" + name.replace("`", "``") + "`"


def qualified(schema: str, table: str) -> str:
    """``schema.table`` with both parts quoted.

    >>> qualified("shop__br_dev", "orders")
    '`shop__br_dev`.`orders`'
    """
    return f"{quote(schema)}.{quote(table)}"

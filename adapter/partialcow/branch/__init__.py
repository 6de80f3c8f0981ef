"""Branch environments: overlay schemas over the tables built without a branch (see ``docs`` in the macros).

A branch stores only the rows that differ from its parent (overlay tables with upserts and tombstones); its views
read the overlay over the parent, so creating a branch copies nothing and merging touches only changed keys.
"""

from __future__ import annotations

from partialcow.branch.naming import (
    MAIN,
    OP_COLUMN,
    SEQ_COLUMN,
    base_schema_of,
    full_table,
    overlay_schema,
    overlay_table,
    validate_branch_name,
)
from partialcow.branch.operations import (
    create_branch,
    diff_branch,
    drop_branch,
    list_branches,
    materialize_branch,
    merge_branch,
)
from partialcow.branch.overlay import build_model, resolve_parent
from partialcow.branch.store import BranchRecord, BranchStore

__all__ = [
    "MAIN",
    "OP_COLUMN",
    "SEQ_COLUMN",
    "BranchRecord",
    "BranchStore",
    "base_schema_of",
    "build_model",
    "create_branch",
    "diff_branch",
    "drop_branch",
    "full_table",
    "list_branches",
    "materialize_branch",
    "merge_branch",
    "overlay_schema",
    "overlay_table",
    "resolve_parent",
    "validate_branch_name",
]

"""Branch environments: overlay schemas over the tables built without a branch.

Using it from dbt::

    dbt run-operation branch_create --args '{name: dev}'          # O(1): records the parent's snapshots
    dbt run --vars '{branch: dev}'                                # or DBT_PARTIALCOW_BRANCH=dev dbt run
    dbt run-operation branch_diff --args '{name: dev}'
    dbt run-operation branch_merge --args '{name: dev}'           # on_conflict: fail (default) | ours | theirs
    dbt run-operation branch_list
    dbt run-operation branch_materialize --args '{name: dev}'     # optional models: [orders]
    dbt run-operation branch_refresh --args '{name: dev}'         # re-pin models to the parents as they are now
    dbt run-operation branch_drop --args '{name: dev}'

Layout (branch ``dev``, model ``orders`` of schema ``shop``): everything lives in the overlay schema
``shop__br_dev``: ``orders`` (what users and ``ref()`` read: a view, or an image table, below), the overlay table
``orders__pcow_overlay``
(the model's columns + ``_pcow_op`` 'U'/'D' + ``_pcow_seq``, one row per key that differs from the parent),
``orders__pcow_base`` (the parent's rows at the merge base for those keys) and, after ``branch_materialize``,
``orders__pcow_full``. Branch metadata is the Iceberg table ``<target schema>.partialcow_branches``; each record
lists the base schemas the branch covers, and its operations look only at their overlay schemas (another target's
branch of the same name on the same metastore is never touched). Branch names match ``^[a-z][a-z0-9_]{0,39}$``
without ``__``; ``main`` names the tables built without a branch.

Behaviour:

- Table and incremental models built on a branch are computed in full and diffed by ``unique_key`` against the
  parent (new/changed rows 'U', missing parent keys 'D'; an incremental model's missing keys keep the parent's
  rows, as its runs there upsert and never delete). Models without ``unique_key``, or whose columns differ
  from the parent's, are *detached*: the overlay holds the whole result and the view reads it alone; a diff
  compares whole rows; a merge replaces the parent's rows (a conflict if the parent changed too).
- A keyed model on a branch is read through its *image*: the overlay applied to the parent as an Iceberg branch
  ``partialcow_<branch>`` of the model's root table (the parent's untouched data files shared, ``main`` never
  written), registered as the read-only Iceberg table ``orders`` of the overlay schema (``gc.enabled=false``,
  table property ``partialcow.image-of``; dbt lists it as a view), so a read is one table scan with no view to
  resolve. The branch's ``image_mode`` chooses how changed keys are held:
  ``copy-on-write`` (default) rewrites the data files they are in with the page engine, so reads cost what the
  table's cost; ``merge-on-read`` hides them with position deletes (small images, reads apply the deletes). The
  image pins
  the parent as of the model's last build on the branch; ``branch_refresh`` re-pins it to the parent as it is
  now. Where there can be no image (detached models, format-version 3 roots, a parent branch whose model is
  detached or materialized) the view reads the parent *live* through an anti-join with the overlay; past a parent
  branch whose model changes nothing (no image of its own) a child's image starts from what that parent shows
  (:func:`partialcow.branch.image.fork_level`). ``ref()`` reads the nearest level that
  built the model (branch, parent branch, ..., main). Views and seeds built on a branch are plain
  objects in the overlay schema (seeds are copies and are not merged).
- Merge is three-way by key (base = parent at creation/last merge, ours = the branch, theirs = the parent now);
  after a merge the branch's overlays are emptied (a detached model leaves the branch) and it continues from the
  merge result. An empty overlay follows ``ALTER TABLE`` on its parent (its columns become the parent's at the
  next ``ref()`` and branch operation: :func:`partialcow.branch.overlay.follow_parent`); one holding rows keeps its
  columns, and a model whose parent lost or retyped one of them is refused by name until it is built again.
- ``partial_cow_incremental`` models apply each batch to what the branch shows and store the result as the same
  kind of overlay (:mod:`partialcow.branch.incremental`); ``is_incremental()`` holds on a branch when the branch or
  a parent level has the model.
- Run-operation arguments are parsed into typed options (:mod:`partialcow.branch.options`).
- Iceberg only (time travel and MERGE INTO; a Delta model on a branch is refused); one writer at a time per branch.
- A project's own ``generate_schema_name`` or ``ref`` macro takes precedence over ours and disables branching.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from partialcow.branch.diff import diff_branch
    from partialcow.branch.levels import resolve_parent
    from partialcow.branch.lifecycle import (
        create_branch,
        drop_branch,
        list_branches,
        materialize_branch,
        refresh_branch,
    )
    from partialcow.branch.merge import merge_branch
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
    from partialcow.branch.options import parse_options, run_operation
    from partialcow.branch.overlay import build_model
    from partialcow.branch.store import BranchStore
    from partialcow.branch.types import BranchRecord

# Loaded on first use: dbt imports this package with the adapter, before the Spark session can start, and a
# `naming` lookup (every dbt process) must not pay for the image and merge machinery (pyarrow, the page engine).
_HOME = {
    "diff_branch": "diff",
    "resolve_parent": "levels",
    **dict.fromkeys(
        ("create_branch", "drop_branch", "list_branches", "materialize_branch", "refresh_branch"), "lifecycle"
    ),
    "merge_branch": "merge",
    **dict.fromkeys(
        ("MAIN", "OP_COLUMN", "SEQ_COLUMN", "base_schema_of", "full_table", "overlay_schema", "overlay_table",
         "validate_branch_name"),
        "naming",
    ),
    "parse_options": "options",
    "run_operation": "options",
    "build_model": "overlay",
    "BranchStore": "store",
    "BranchRecord": "types",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


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
    "parse_options",
    "refresh_branch",
    "resolve_parent",
    "run_operation",
    "validate_branch_name",
]

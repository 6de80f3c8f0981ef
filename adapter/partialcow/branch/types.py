"""The branch layer's shared value types: branch records, overlay layouts, image modes, merge policies.

Kept apart from the modules that use them (``store``, ``image``, ``overlay``, the operations), so that none of those
imports another just for a type.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Literal, get_args

from partialcow.branch.naming import base_schema_of, overlay_table, qualified
from partialcow.exceptions import BranchError

__all__ = [
    "CONFLICT_POLICIES",
    "COPY_ON_WRITE",
    "IMAGE_MODES",
    "MERGE_ON_READ",
    "PRESENT_COLUMN",
    "BranchRecord",
    "ConflictPolicy",
    "ImageMode",
    "OverlayInfo",
    "OverlayMode",
    "validate_conflict_policy",
    "validate_image_mode",
]

ImageMode = Literal["copy-on-write", "merge-on-read"]
COPY_ON_WRITE: ImageMode = "copy-on-write"
MERGE_ON_READ: ImageMode = "merge-on-read"
IMAGE_MODES: tuple[ImageMode, ...] = get_args(ImageMode)

#: How a merge settles a key both sides changed: ``fail`` (the default: nothing is applied, the conflicts are
#: listed), ``ours`` (the branch's row wins) or ``theirs`` (the parent's row stays).
ConflictPolicy = Literal["fail", "ours", "theirs"]
CONFLICT_POLICIES: tuple[ConflictPolicy, ...] = get_args(ConflictPolicy)

#: Overlay mode: ``delta`` holds the rows that differ from the parent by key; ``detached`` the model's whole result.
OverlayMode = Literal["delta", "detached"]

#: In a base image: True = the parent had the key at the merge base, False = it did not, NULL = unknown.
PRESENT_COLUMN = "_pcow_present"


def validate_image_mode(mode: object) -> ImageMode:
    """``mode`` if it names an image mode, else a ``BranchError``.

    >>> validate_image_mode("merge-on-read")
    'merge-on-read'
    >>> validate_image_mode("fast")
    Traceback (most recent call last):
    ...
    partialcow.exceptions.BranchError: image mode 'fast' is not one of copy-on-write, merge-on-read
    """
    if mode not in IMAGE_MODES:
        raise BranchError(f"image mode {mode!r} is not one of {', '.join(IMAGE_MODES)}")
    return mode  # type: ignore[return-value]


def validate_conflict_policy(policy: object, *, branch: str) -> ConflictPolicy:
    """``policy`` if it names a conflict policy (None means ``fail``), else a ``BranchError`` naming the branch.

    >>> validate_conflict_policy(None, branch="dev"), validate_conflict_policy("ours", branch="dev")
    ('fail', 'ours')
    >>> validate_conflict_policy("mine", branch="dev")
    Traceback (most recent call last):
    ...
    partialcow.exceptions.BranchError: branch_merge dev: on_conflict 'mine' is not one of: fail, ours, theirs (ours = the branch's rows win, theirs = the parent's rows stay)
    """  # noqa: E501 - a doctest output line cannot wrap
    if policy is None:
        return "fail"
    if policy not in CONFLICT_POLICIES:
        raise BranchError(
            f"branch_merge {branch}: on_conflict {policy!r} is not one of: {', '.join(CONFLICT_POLICIES)} "
            "(ours = the branch's rows win, theirs = the parent's rows stay)"
        )
    return policy  # type: ignore[return-value]


@dataclass(frozen=True)
class BranchRecord:
    """One branch as stored in the metadata table (update with ``dataclasses.replace``, never field by field).

    ``base_snapshots``: ``schema.table -> snapshot id`` of every parent-chain table when the branch was created or
    last merged (the three-way merge's base), and of every parent branch's image (keyed by the image table's name,
    ``<schema>__br_<parent>.<model>``: what that branch showed); ``-1``: the table existed without a snapshot.
    ``schemas``: the base schemas the branch covers (lower case; see :meth:`base_schemas`); None in records written
    before it existed.
    """

    name: str
    parent: str
    created_at: _dt.datetime
    base_snapshots: dict[str, int] = field(default_factory=dict)
    merged_at: _dt.datetime | None = None
    image_mode: ImageMode = COPY_ON_WRITE
    schemas: tuple[str, ...] | None = None

    def base_schemas(self, meta_schema: str) -> tuple[str, ...]:
        """The base schemas whose overlay schemas ``<schema>__br_<name>`` are this branch's, lower case.

        Overlay schemas are named by base schema and branch name only, so targets sharing a metastore (each with
        its own ``meta_schema``) may each have a branch ``dev``: a branch's operations look only in the schemas
        its record covers (those of the models it was created with or built on it) and the meta schema (its diff
        and conflict tables). A record written before ``schemas`` existed covers the schemas of its merge base,
        which holds every model of the project that existed when the branch was created or last merged.

        >>> record = BranchRecord("dev", "main", _dt.datetime(2024, 1, 1), {"shop.orders": 1, "shop__br_x.t": 2})
        >>> record.base_schemas("meta")
        ('meta', 'shop')
        >>> BranchRecord("dev", "main", record.created_at, schemas=("sales",)).base_schemas("Meta")
        ('meta', 'sales')
        """
        if self.schemas is None:
            recorded = [base_schema_of(name.split(".", 1)[0]) for name in self.base_snapshots]
        else:
            recorded = list(self.schemas)
        return tuple(sorted({meta_schema.lower(), *(schema.lower() for schema in recorded)}))


@dataclass(frozen=True)
class OverlayInfo:
    """What an overlay table stores: its data columns (without ``_pcow_*``), key columns and mode.

    ``keeps_history``: the model is a dbt ``incremental`` model without ``unique_key`` (its runs append): the
    parent's rows are its history, which a merge never replaces."""

    schema: str
    identifier: str
    columns: tuple[str, ...]
    key_columns: tuple[str, ...]
    mode: OverlayMode
    keeps_history: bool = False

    @property
    def table(self) -> str:
        return qualified(self.schema, overlay_table(self.identifier))

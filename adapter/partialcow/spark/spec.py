"""The contract of a batch of changes: which columns are keys, op codes and sequence, what to update.

>>> spec = ChangeSpec(key_columns=("id",), op_column="_op", sequence_column="_ts")
>>> spec.control_columns
('_op', '_ts')
>>> ChangeSpec(key_columns=("id",), op_column="_op", delete_ops=("U", "D"), model="m")
Traceback (most recent call last):
...
partialcow.exceptions.ConfigurationError: model m: op code(s) ['U'] are in more than one of insert, update and delete (insert ['I'], update ['U'], delete ['U', 'D']): give each code one meaning (op_codes replaces a default list as a whole)
"""  # noqa: E501 - a doctest output line cannot wrap

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

__all__ = ["ChangeSpec", "OnSchemaChange"]

OnSchemaChange = Literal["ignore", "fail", "append_new_columns", "sync_all_columns"]


@dataclass(frozen=True)
class ChangeSpec:
    """How to read a batch of changes (the model contract of ``partial_cow_incremental``)."""

    key_columns: tuple[str, ...]
    op_column: str | None = None
    insert_ops: tuple[str, ...] = ("I",)
    update_ops: tuple[str, ...] = ("U",)
    delete_ops: tuple[str, ...] = ("D",)
    sequence_column: str | None = None
    update_columns: tuple[str, ...] | None = None  # None: every non-key column of the table
    exclude_columns: tuple[str, ...] = ()
    on_schema_change: OnSchemaChange = "ignore"
    model: str = "changes"  # named in every error message
    extra_table_properties: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        roles = {"insert_ops": self.insert_ops, "update_ops": self.update_ops, "delete_ops": self.delete_ops}
        shared = sorted({code for a, codes in roles.items() for code in codes
                         if any(code in other for b, other in roles.items() if b != a)})
        if shared:
            from partialcow.exceptions import ConfigurationError

            raise ConfigurationError(
                f"model {self.model}: op code(s) {shared} are in more than one of insert, update and delete "
                f"(insert {list(self.insert_ops)}, update {list(self.update_ops)}, delete {list(self.delete_ops)}): "
                "give each code one meaning (op_codes replaces a default list as a whole)"
            )

    def excludes(self, column: str) -> bool:
        """Whether ``merge_exclude_columns`` names ``column`` (in any letter case, as dbt compares them: Spark's
        column names are case-insensitive).

        >>> ChangeSpec(key_columns=("id",), exclude_columns=("CREATED_AT",)).excludes("created_at")
        True
        """
        return column.lower() in {c.lower() for c in self.exclude_columns}

    def spelled_for(self, columns: Sequence[str]) -> ChangeSpec:
        """This spec with each column it names spelled as the batch's ``columns`` spell it, where it names one of
        them in other letter case only (Spark resolves names case-insensitively, and dbt-spark's MERGE matches
        ``unique_key='ID'`` to a column ``id``); names matching no column, or several, stay as they are.

        >>> ChangeSpec(key_columns=("ID",), op_column="_OP", update_columns=("V",)).spelled_for(["id", "_op", "v"])
        ChangeSpec(key_columns=('id',), op_column='_op', ... update_columns=('v',), ...)
        """
        by_lower: dict[str, list[str]] = {}
        for column in columns:
            by_lower.setdefault(column.lower(), []).append(column)

        def spelled(name: str) -> str:
            found = by_lower.get(name.lower(), [])
            return found[0] if name not in columns and len(found) == 1 else name

        return replace(
            self,
            key_columns=tuple(map(spelled, self.key_columns)),
            op_column=spelled(self.op_column) if self.op_column else None,
            sequence_column=spelled(self.sequence_column) if self.sequence_column else None,
            update_columns=None if self.update_columns is None else tuple(map(spelled, self.update_columns)),
        )

    @property
    def control_columns(self) -> tuple[str, ...]:
        """Columns that steer the change but are not stored: the op code and the sequence."""
        return tuple(c for c in (self.op_column, self.sequence_column) if c)



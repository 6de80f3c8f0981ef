"""Run-operation arguments are parsed once into typed options (issue 28: they crossed from Jinja as a dict spread
into ``**kwargs``). No Spark needed."""

from __future__ import annotations

import pytest

from partialcow.branch.options import (
    CreateOptions,
    DiffOptions,
    ListOptions,
    MaterializeOptions,
    MergeOptions,
    parse_options,
)
from partialcow.exceptions import BranchError

PARSED = [
    ("create", {"name": "dev", "parent": None, "image_mode": None, "models": [["shop", "orders"]]},
     CreateOptions(name="dev", models=(("shop", "orders"),))),
    ("create", {"name": "feat", "parent": "dev", "image_mode": "merge-on-read"},
     CreateOptions(name="feat", parent="dev", image_mode="merge-on-read")),
    ("diff", {"name": "dev"}, DiffOptions(name="dev")),
    ("merge", {"name": "dev"}, MergeOptions(name="dev", on_conflict="fail")),
    ("merge", {"name": "dev", "on_conflict": "fail"}, MergeOptions(name="dev", on_conflict="fail")),
    ("merge", {"name": "dev", "on_conflict": "ours"}, MergeOptions(name="dev", on_conflict="ours")),
    ("merge", {"name": "dev", "on_conflict": "theirs"}, MergeOptions(name="dev", on_conflict="theirs")),
    ("list", {}, ListOptions()),
    ("list", None, ListOptions()),
    ("materialize", {"name": "dev", "models": "orders"}, MaterializeOptions(name="dev", models=("orders",))),
    ("materialize", {"name": "dev", "models": ["a", "b"]}, MaterializeOptions(name="dev", models=("a", "b"))),
]

REFUSED = [
    ("merge", {"name": "dev", "on_conflict": "mine"}, "on_conflict 'mine' is not one of: fail, ours, theirs"),
    ("merge", {"name": "dev", "onconflict": "ours"}, "unknown argument.* onconflict: accepted are name, on_conflict"),
    ("create", {"name": "Dev"}, "invalid branch name 'Dev'"),
    ("create", {"name": "dev", "parent": "x-y"}, "invalid branch name 'x-y'"),
    ("create", {"name": "main"}, "'main' names the tables built without a branch"),
    ("create", {"name": "dev", "image_mode": "fast"}, "image mode 'fast' is not one of"),
    ("create", {"name": "dev", "models": ["orders"]}, "models must be a list of \\[schema, model\\] pairs"),
    ("drop", {}, "branch_drop: the branch name is missing"),
    ("materialize", {"name": "dev", "models": [1]}, "models must be a model name or a list of model names"),
    ("rename", {"name": "dev"}, "unknown branch operation 'rename'"),
    ("list", {"name": "dev"}, "unknown argument.* name: accepted are none"),
]


@pytest.mark.parametrize("operation, raw, expected", PARSED)
def test_arguments_become_typed_options(operation, raw, expected):
    assert parse_options(operation, raw) == expected


@pytest.mark.parametrize("operation, raw, message", REFUSED)
def test_bad_arguments_are_refused_before_any_work(operation, raw, message):
    with pytest.raises(BranchError, match=message):
        parse_options(operation, raw)

"""Branch names: the allowlist that keeps branch names safe inside backtick-quoted SQL identifiers."""

from __future__ import annotations

import pytest

from partialcow.branch.naming import base_schema_of, overlay_schema, quote, validate_branch_name
from partialcow.exceptions import BranchError

VALID = ["dev", "feature_1", "a", "x" * 40, "fix_2024_q1"]
INVALID = ["", "Dev", "1dev", "_dev", "dev-1", "dev.x", "dev`x", "x" * 41, "a__b", "dev ", "déjà", None, 7]


@pytest.mark.parametrize("name", VALID)
def test_valid_names(name):
    assert validate_branch_name(name) == name
    schema = overlay_schema("shop", name)
    assert schema == f"shop__br_{name}"
    assert base_schema_of(schema) == "shop"


@pytest.mark.parametrize("name", INVALID)
def test_invalid_names_are_refused_with_the_name(name):
    with pytest.raises(BranchError, match="invalid branch name") as info:
        validate_branch_name(name)
    assert repr(name) in str(info.value)


def test_main_is_reserved_but_is_a_valid_parent():
    with pytest.raises(BranchError, match="'main'"):
        validate_branch_name("main")
    assert validate_branch_name("main", allow_main=True) == "main"
    assert overlay_schema("shop", "main") == "shop"


def test_schema_names_are_checked_too():
    with pytest.raises(BranchError, match="schema"):
        overlay_schema("shop`; drop", "dev")


def test_quote_escapes_backticks():
    assert quote("a`b") == "`a``b`"


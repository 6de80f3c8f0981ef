"""CI's selection of variants (tests/budget.py): one item per check, each variant still run by some checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

import budget


@dataclass
class _Spec:
    params: dict


@dataclass
class _Item:
    originalname: str
    params: dict = field(default_factory=dict)
    path: Path = Path("tests/t.py")

    @property
    def callspec(self) -> _Spec:
        return _Spec(self.params)

    @property
    def nodeid(self) -> str:
        return f"{self.path}::{self.originalname}{sorted(self.params.items())}"


def test_one_item_per_check_and_every_variant_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(budget, "LONG", False)
    items = [_Item(f"test_{n}", {"pipeline_path": path, "case": case})
             for n in range(20) for case in ("a", "b") for path in ("driver", "spark")]
    items += [_Item("test_plain"), _Item("test_cases", {"case": "x"}), _Item("test_cases", {"case": "y"})]
    kept, dropped = budget.one_variant_each(items)
    assert len(kept) == 20 * 2 + 3 and len(dropped) == 20 * 2
    assert {(i.originalname, i.params.get("case")) for i in kept} == {(i.originalname, i.params.get("case"))
                                                                      for i in items}
    assert {i.params["pipeline_path"] for i in kept if "pipeline_path" in i.params} == {"driver", "spark"}
    assert kept == [i for i in items if i in kept]  # collection order kept
    monkeypatch.setattr(budget, "LONG", True)
    assert budget.one_variant_each(items) == (items, [])

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
        ids = "-".join(str(getattr(v, "__name__", v)) for v in self.params.values())
        return f"{self.path}::{self.originalname}[{ids}]"


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


def test_every_worker_deselects_the_same_items_when_a_parameter_is_a_function(monkeypatch: pytest.MonkeyPatch) -> None:
    """xdist collects in every worker and refuses to run when their collections differ: a function-valued parameter
    (its repr holds an address, different in each process) must not change which variant is kept."""
    monkeypatch.setattr(budget, "LONG", False)

    def collect() -> list[_Item]:
        steps = []
        for n in range(24):
            def step() -> None: ...
            step.__name__ = step.__qualname__ = f"step{n}"
            steps.append(step)
        return [_Item("test_f", {"step": s, "pipeline_path": path}) for s in steps for path in ("driver", "spark")]

    first, second = budget.one_variant_each(collect())[0], budget.one_variant_each(collect())[0]
    assert [i.nodeid for i in first] == [i.nodeid for i in second]
    assert len(first) == 24

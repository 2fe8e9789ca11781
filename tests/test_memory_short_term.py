"""ShortTermMemory (paper 001): at most 7 items per agent, each lives ~30 s of simulation time."""
from __future__ import annotations

import pytest

from metacog_fast.memory import ShortTermConfig, ShortTermMemory


def test_capacity_keeps_the_newest_seven():
    m = ShortTermMemory()
    for i in range(10):
        m.add("ann", f"saw {i}", now=float(i))
    items = m.items("ann", now=9.0)
    assert [x.item for x in items] == [f"saw {i}" for i in range(3, 10)]
    assert [x.time for x in items] == [float(i) for i in range(3, 10)]


def test_expiry_after_ttl():
    m = ShortTermMemory()
    m.add("ann", "a", now=0.0)
    m.add("ann", "b", now=20.0)
    assert [x.item for x in m.items("ann", now=29.9)] == ["a", "b"]
    assert [x.item for x in m.items("ann", now=30.0)] == ["b"]
    assert m.items("ann", now=50.0) == []


def test_agents_are_separate_and_configurable():
    m = ShortTermMemory(capacity=2, ttl=5.0)
    m.add("ann", 1, 0.0)
    m.add("bob", 2, 0.0)
    m.add("ann", 3, 1.0)
    m.add("ann", 4, 2.0)
    assert [x.item for x in m.items("ann", 2.0)] == [3, 4]
    assert [x.item for x in m.items("bob", 2.0)] == [2]
    assert m.items("carl", 2.0) == []
    assert [x.item for x in m.items("bob", 6.0)] == []
    m.clear("ann")
    assert m.items("ann", 2.0) == [] and len(m) == 0


def test_bad_input():
    with pytest.raises(ValueError, match="capacity"):
        ShortTermConfig(capacity=0)
    with pytest.raises(ValueError, match="ttl"):
        ShortTermConfig(ttl=-1)
    m = ShortTermMemory()
    with pytest.raises(ValueError, match="agent"):
        m.add("", "x", 0.0)
    with pytest.raises(ValueError, match="now"):
        m.add("ann", "x", float("nan"))
    m.add("ann", "x", 10.0)
    with pytest.raises(ValueError, match="time went back"):
        m.add("ann", "y", 5.0)

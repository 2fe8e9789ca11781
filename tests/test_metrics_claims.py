"""A paper's ordering of configurations tested as stated (metrics/claims.py), and metacognitive
accuracy with its cluster-bootstrap interval (metrics/clustered.py)."""
from __future__ import annotations

import numpy as np
import pytest

from metacog_fast.metrics import accuracy_clustered, evaluate_claim, evaluate_claims, metacognitive_accuracy, parse_claim


def _per_game(rates: list[float]) -> dict[str, float]:
    return {f"g{i:02d}": r for i, r in enumerate(rates)}


def test_parse_claim_chains_and_relations():
    assert parse_claim("muse >> reflexion > react") == [("muse", ">>", "reflexion"), ("reflexion", ">", "react")]
    assert parse_claim("full>=+srm>+amm") == [("full", ">=", "+srm"), ("+srm", ">", "+amm")]
    for bad in ("", "muse", "muse > ", "> react", 3):
        with pytest.raises(ValueError, match="claim"):
            parse_claim(bad)


def test_verdicts_follow_the_interval():
    n = 40
    strong = _per_game([1.0] * n)
    mid = _per_game([1.0 if i % 2 else 0.0 for i in range(n)])  # 50 %
    weak = _per_game([0.0] * n)
    near = _per_game([1.0 if i % 2 or i == 0 else 0.0 for i in range(n)])  # 52.5 %: not shown over mid
    per = {"strong": strong, "mid": mid, "weak": weak, "near": near}
    r = evaluate_claim(per, "strong >> mid > weak")
    assert r["verdict"] == "holds" and [p["verdict"] for p in r["parts"]] == ["holds", "holds"]
    assert r["parts"][0]["diff"] == pytest.approx(0.5) and r["parts"][0]["threshold"] == 0.10
    assert evaluate_claim(per, "near > mid")["verdict"] == "not shown"
    rev = evaluate_claim(per, "weak > strong")
    assert rev["verdict"] == "reversed" and rev["parts"][0]["high"] < 0
    # '>=' fails only when shown worse
    assert evaluate_claim(per, "mid >= near")["verdict"] == "holds"
    assert evaluate_claim(per, "weak >= mid")["verdict"] == "reversed"
    # '>>' needs the margin: a +12.5-point gain over 40 games has an interval reaching below +10
    plus = _per_game([1.0 if i % 8 else 0.0 for i in range(n)])  # 87.5 %
    base = _per_game([1.0 if i % 4 else 0.0 for i in range(n)])  # 75 %
    per2 = {"a": plus, "b": base}
    assert evaluate_claim(per2, "a >> b")["verdict"] == "not shown"
    assert evaluate_claim(per2, "a >> b", much=0.0)["parts"][0]["threshold"] == 0.0


def test_a_chain_holds_only_when_every_part_holds_and_missing_is_named():
    n = 30
    per = {"a": _per_game([1.0] * n), "b": _per_game([0.5] * n), "c": _per_game([0.5] * n)}
    r = evaluate_claim(per, "a > b > c")
    assert [p["verdict"] for p in r["parts"]] == ["holds", "not shown"] and r["verdict"] == "not shown"
    m = evaluate_claim(per, "a > zzz")
    assert m["verdict"] == "missing" and m["parts"][0]["verdict"] == "missing (zzz)" and m["parts"][0]["diff"] is None
    assert [x["claim"] for x in evaluate_claims(per, ["a > b", "b > c"])] == ["a > b", "b > c"]
    with pytest.raises(ValueError, match="much"):
        evaluate_claim(per, "a > b", much=-0.1)


def test_claims_pair_by_unit_and_are_deterministic():
    rng = np.random.default_rng(1)
    a = {f"g{i}": float(rng.random() < 0.7) for i in range(50)}
    b = {f"g{i}": float(rng.random() < 0.4) for i in range(50)}
    b_shuffled = dict(reversed(list(b.items())))
    r1 = evaluate_claim({"a": a, "b": b}, "a > b")
    r2 = evaluate_claim({"a": a, "b": b_shuffled}, "a > b")
    assert r1 == r2 and r1["parts"][0]["n"] == 50


def test_accuracy_clustered_value_interval_and_clusters():
    rng = np.random.default_rng(0)
    eps, probs, labels = [], [], []
    for e in range(30):
        won = e % 3 == 0
        k = int(rng.integers(2, 8))
        eps += [f"e{e}"] * k
        labels += [float(won)] * k
        probs += list(np.clip(rng.normal(0.6 if won else 0.4, 0.2, k), 0, 1))
    r = accuracy_clustered(probs, labels, eps)
    assert r["value"] == pytest.approx(metacognitive_accuracy(np.array(probs), np.array(labels)))
    assert r["low"] <= r["value"] <= r["high"] and (r["positives"], r["negatives"]) == (10, 20)
    assert r == accuracy_clustered(probs, labels, eps)  # seeded
    # one episode repeated as many rows: the interval is that of few episodes, wider than rows alone give
    many = accuracy_clustered(probs * 1, labels, [f"r{i}" for i in range(len(probs))])
    assert (r["high"] - r["low"]) > (many["high"] - many["low"])
    with pytest.raises(ValueError, match="episodes"):
        accuracy_clustered(probs, labels, eps[:-1])

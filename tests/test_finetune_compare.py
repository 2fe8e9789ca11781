"""`metacog finetune compare`: paired tests of two evaluations, overall and within task type."""
import json
import math

import pytest

from metacog_fast.alfworld.finetune.evaluate import compare


def _eval(tmp_path, name, per_game):
    d = tmp_path / name
    d.mkdir()
    (d / "summary.json").write_text(json.dumps({"per_game": per_game}))
    return d


def test_compare_pairs_by_game_overall_and_within_type(tmp_path):
    heat = [f"pick_heat_then_place_in_recep-Egg-None-Fridge-{i}__t" for i in range(6)]
    look = [f"look_at_obj_in_light-Book-None-DeskLamp-{i}__t" for i in range(4)]
    a = {**{g: [1] for g in heat}, **{g: [0] for g in look}, "only_in_a__t": [1]}
    b = {**{g: [0] for g in heat}, **{g: [1 if i < 2 else 0] for i, g in enumerate(look)}}
    r = compare(_eval(tmp_path, "a", a), _eval(tmp_path, "b", b))
    assert r["games"] == 10  # the game A alone played is left out
    assert r["mcnemar"]["a_only"] == 6 and r["mcnemar"]["b_only"] == 2
    assert math.isclose(r["mcnemar"]["p_value"], 2 * sum(math.comb(8, i) for i in range(3)) / 2 ** 8)
    h = r["by_task_type_mcnemar"]["pick_heat_then_place_in_recep"]
    assert (h["games"], h["a_won"], h["b_won"], h["a_only"], h["b_only"]) == (6, 6, 0, 6, 0)
    assert math.isclose(h["p_value"], 2 / 2 ** 6)
    lk = r["by_task_type_mcnemar"]["look_at_obj_in_light"]
    assert (lk["a_won"], lk["b_won"], lk["p_value"]) == (0, 2, 0.5)
    assert set(r["by_task_type_mcnemar"]) == {"pick_heat_then_place_in_recep", "look_at_obj_in_light"}
    assert math.isclose(r["paired_bootstrap"]["diff"], 0.4)


def test_compare_needs_shared_games(tmp_path):
    with pytest.raises(ValueError, match="share 1 games"):
        compare(_eval(tmp_path, "a", {"x__t": [1], "y__t": [0]}), _eval(tmp_path, "b", {"x__t": [0]}))

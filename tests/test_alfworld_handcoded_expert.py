"""ALFWorld's hand-coded searching expert behind our environment: it wins train games from what it
observes (not from the planner's knowledge), labels states off its own path (DAgger), is
deterministic, and its episodes become the ``alfworld_handcoded`` SFT source in the agents'
transcript form."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("alfworld")

from metacog_fast.envs import make_env  # noqa: E402
from metacog_fast.alfworld.expert import task_params_of  # noqa: E402
from metacog_fast.alfworld.finetune import DataConfig, actor_transcript, build_dataset, load_dataset  # noqa: E402
from metacog_fast.alfworld.finetune.data import select_walkthrough_games  # noqa: E402


@pytest.fixture(scope="module")
def env():
    e = make_env("alfworld", split="train", max_episode_steps=50, handcoded_expert=True)
    yield e
    e.close()


def _play(env, game, first: list[str] = ()):
    obs, info = env.reset(game=str(game))
    taken = []
    for a in first:
        obs, _r, done, info = env.step(a)
        taken.append(a)
    done = False
    while not done and not info["won"]:
        a = env.handcoded_action()
        if a is None:
            break
        obs, _r, done, info = env.step(a)
        taken.append(a)
    return taken, info


def test_task_parameters_come_from_the_folder_name():
    p = task_params_of("x/look_at_obj_in_light-AlarmClock-None-DeskLamp-301/trial_1/game.tw-pddl")
    assert p == {"task_type": "look_at_obj_in_light", "object_target": "alarmclock", "mrecep_target": "",
                 "parent_target": "", "toggle_target": "desklamp", "object_sliced": False}
    q = task_params_of("x/pick_heat_then_place_in_recep-Egg-None-CounterTop-5/trial_1/game.tw-pddl")
    assert (q["object_target"], q["parent_target"], q["toggle_target"]) == ("egg", "countertop", "")
    with pytest.raises(ValueError, match="gamefile: task folder 'weird' is not"):
        task_params_of("x/weird/trial/game.tw-pddl")


def test_expert_searches_wins_and_is_deterministic(env):
    games = select_walkthrough_games("train", 6)  # one game of each task type
    won = 0
    for g in games:
        taken, info = _play(env, g)
        again, _ = _play(env, g)
        assert taken == again  # seeded by game and step
        won += bool(info["won"])
    assert won >= 5  # the expert is not perfect (two-object games can loop), but close


def test_expert_labels_states_off_its_path_and_recovers(env):
    g = select_walkthrough_games("train", 1)[0]
    obs, info = env.reset(game=str(g))
    first = env.handcoded_action()
    assert first is not None and first.startswith("go to ")
    wrong = next(a for a in info["admissible"] if a.startswith("go to ") and a != first)
    taken, info = _play(env, g, first=[wrong, "inventory"])
    assert taken[:2] == [wrong, "inventory"] and info["won"]  # it labels the agent's state and still wins


def test_handcoded_action_needs_the_option():
    e = make_env("alfworld", split="train", max_episode_steps=5)
    try:
        e.reset(game=0)
        with pytest.raises(RuntimeError, match="handcoded_expert=True"):
            e.handcoded_action()
    finally:
        e.close()
    with pytest.raises(ValueError, match="expert: expected one of"):
        DataConfig(expert="oracle").validate()


def test_handcoded_dataset_holds_the_expert_transcripts(tmp_path):
    games_dir = tmp_path / "games"
    m = build_dataset(tmp_path / "hc", DataConfig(max_games=3, expert="handcoded"), games_dir=games_dir)
    ex = load_dataset(tmp_path / "hc")
    assert m["by_source"] == {"alfworld_handcoded": len(ex)} and len(ex) >= 2
    assert sorted(p.name.endswith(".handcoded.json") for p in games_dir.iterdir()) == [True] * 3
    e = make_env("alfworld", split="train", max_episode_steps=50, handcoded_expert=True)
    try:
        for rec in ex:
            obs, info = e.reset(game=_game_path(rec))
            for a, o in rec["pairs"]:
                assert e.handcoded_action() == a
                obs, _r, _d, info = e.step(a)
                assert " ".join(obs.split()) == o
            assert info["won"] and rec["won"]
            t = actor_transcript(rec["intro"], rec["pairs"], [])
            assert [t.text[s:end] for s, end in t.action_spans] == [f" {a}\n" for a, _ in rec["pairs"]]
    finally:
        e.close()
    # the walkthrough dataset of the same games is another configuration, and another record file
    w = build_dataset(tmp_path / "wt", DataConfig(max_games=3), games_dir=games_dir)
    assert w["by_source"] == {"alfworld_expert": 3}


def _game_path(rec) -> str:
    from metacog_fast.alfworld.env import find_split_dir

    return str(find_split_dir("train") / rec["gamefile"])


def test_two_object_expert_places_the_second_object():
    """The expert's tracking knows "put"; these games say "move". Without the translation it kept the
    placed book in its inventory and tried to place it again (this game was lost)."""
    from metacog_fast.alfworld.protocol import select_games

    g = next(x for x in select_games("valid_train", 60) if x["game"].startswith("pick_two_obj_and_place-Book-None-Desk-309"))
    e = make_env("alfworld", split="valid_train", max_episode_steps=50, handcoded_expert=True)
    try:
        taken, info = _play(e, g["gamefile"])
    finally:
        e.close()
    moves = [a for a in taken if a.startswith("move ")]
    assert info["won"] and len(moves) == 2 and moves[0] != moves[1], taken


def test_dagger_episode_trains_only_on_the_experts_commands(tmp_path, smollm2_tokenizer):
    """A real DAgger collection (shipped actor, llama.cpp) of one game: with beta 1 every executed
    command is the expert's label, with beta 0 only the agreed ones are loss steps, and SFT's labels
    cover exactly those commands' tokens."""
    pytest.importorskip("llama_cpp")
    pytest.importorskip("transformers")
    from metacog_fast.alfworld.finetune.dagger import DaggerConfig, collect_dagger
    from metacog_fast.alfworld.finetune.sft import SFTConfig, build_rows

    recs = {}
    for beta in (1.0, 0.0):
        m = collect_dagger(tmp_path / f"b{beta}", DaggerConfig(max_games=1, beta=beta, max_steps=4))
        assert m["games"] == 1 and m["steps"] == sum(m["steps_by"].values())
        recs[beta] = json_lines(tmp_path / f"b{beta}" / "games")[0]
    hi, lo = recs[1.0], recs[0.0]
    assert all(s["taken"] == s["label"] for s in hi["steps"] if s["label"] is not None)
    assert all(s["taken"] == s["proposed"] for s in lo["steps"])
    for r in (hi, lo):
        want = [i for i, (a, _o) in enumerate(r["pairs"]) for s in [r["steps"][_step_index(r, i)]]
                if s["by"] in ("agreed", "expert")]
        assert r["loss_steps"] == want
        e = make_env("alfworld", split="train", max_episode_steps=4)  # the executed commands replay exactly
        try:
            e.reset(game=_game_path(r))
            for a, o in r["pairs"]:
                obs, *_ = e.step(a)
                assert " ".join(obs.split()) == o
        finally:
            e.close()
    assert SFTConfig().base == "smollm2"
    tok = smollm2_tokenizer  # load_tokenizer(SFTConfig().base), loaded once per test process
    r = hi if hi["loss_steps"] else lo
    [row] = build_rows(tok, [r], SFTConfig())
    target = [x for x in row["labels"] if x != -100]
    expect = [t for i in r["loss_steps"] for t in tok(f" {r['pairs'][i][0]}\n", add_special_tokens=False)["input_ids"]]
    assert target == expect
    with pytest.raises(ValueError, match="beta: expected a probability"):
        DaggerConfig(beta=1.5).validate()
    with pytest.raises(ValueError, match="evaluation split"):
        DaggerConfig(split="valid_train").validate()


def test_dagger_resume_rebuilds_an_unpacked_collections_dataset(tmp_path, monkeypatch):
    """A collection as the committed records hold it (config.json, games/, manifest.json, no
    dataset.jsonl): ``--resume`` takes its own configuration and rebuilds the same dataset without
    opening the actor; a folder without config.json is a clear error."""
    pytest.importorskip("llama_cpp")
    import metacog_fast.llm as llm_mod
    from metacog_fast.cli.main import main
    from metacog_fast.alfworld.finetune.dagger import DaggerConfig, collect_dagger, folder_config

    out = tmp_path / "c"
    m = collect_dagger(out, DaggerConfig(max_games=1, beta=1.0, max_steps=2, skip_games=3))
    (out / "dataset.jsonl").unlink()
    assert folder_config(out) == DaggerConfig(max_games=1, beta=1.0, max_steps=2, skip_games=3)

    def no_actor(*a, **k):
        raise AssertionError("the actor was opened although every game is there")

    monkeypatch.setattr(llm_mod, "open_llm", no_actor)
    assert main(["finetune", "dagger", "--out", str(out), "--resume", "--actor", "ignored"]) == 0
    again = json.loads((out / "manifest.json").read_text())
    assert again["dataset_sha256"] == m["dataset_sha256"] and again["games"] == 1
    with pytest.raises(ValueError, match="config.json not found"):
        folder_config(tmp_path / "none")


def json_lines(folder):
    import json

    return [json.loads(p.read_text()) for p in sorted(Path(folder).glob("*.json"))]


def _step_index(r, line: int) -> int:
    """The actor takes no thoughts when trained without them: one transcript line per step."""
    assert len(r["pairs"]) == len(r["steps"]), "this test assumes an actor that does not think"
    return line

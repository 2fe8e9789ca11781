"""Every report carries the statistics of docs/statistics.md: Wilson intervals on success rates,
AUROC2 with its interval and episode counts (or "undefined"), paired comparisons of the
configurations with interval and p-value, plots with error bars; old JSON keys kept."""
from __future__ import annotations

import json

import numpy as np
import pytest

from metacog_fast.metrics import auroc2, compare_paired, success_interval, wilson_interval

TYPES = ("pick_and_place_simple", "look_at_obj_in_light")


def _alf_record(agent: str, game: str, ttype: str, won: bool, probs: list[float] | None) -> dict:
    rec = {"game": game, "task_type": ttype, "episode": 1, "phase": "test", "agent": agent, "won": won,
           "steps": 10 if won else 50, "step_log": [{"agent_seconds": 0.01, "how": "exact"}] * 3,
           "llm": {"calls": 3, "prompt_tokens": 100, "completion_tokens": 10, "seconds": 1.0},
           "env_seconds": 0.1, "agent_seconds": 0.03, "wall_seconds": 1.2}
    if probs is not None:
        rec["chunk_probs_pre"] = probs
    return rec


def _alf_run(root, agent: str, wins: list[bool], probs: list[list[float]] | None) -> None:
    d = root / agent
    (d / "episodes").mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"config": {"agent": agent, "adapt_episodes": 0}}))
    for g, won in enumerate(wins):
        game = f"game{g:02d}"
        (d / "episodes" / game).mkdir()
        rec = _alf_record(agent, game, TYPES[g % 2], won, probs[g] if probs else None)
        (d / "episodes" / game / "test_1.json").write_text(json.dumps(rec))


def test_alfworld_report_carries_intervals(tmp_path):
    from metacog_fast.alfworld.report import report

    rng = np.random.default_rng(0)
    muse_wins = [g % 3 != 0 for g in range(18)]  # 12 successes, 6 failures
    probs = [list(np.round(rng.random(3) * 0.5 + 0.4 * w, 2)) for w in muse_wins]
    _alf_run(tmp_path, "muse", muse_wins, probs)
    # muse-lowest: a single successful episode -> AUROC2 undefined, never a number
    low_wins = [g == 0 for g in range(18)]
    _alf_run(tmp_path, "muse-lowest", low_wins, [[0.5, 0.6]] * 18)
    _alf_run(tmp_path, "react", [g % 2 == 0 for g in range(18)], None)
    res = report(tmp_path)
    muse, low, react = res["agents"]["muse"], res["agents"]["muse-lowest"], res["agents"]["react"]
    # old keys kept
    for key in ("success_rate", "mean_steps_charged", "per_type", "auroc2_no_adaptation", "chunks_no_adaptation"):
        assert key in muse
    # Wilson on every success rate
    assert muse["success"]["successes"] == 12 and muse["success"]["n"] == 18
    assert (muse["success"]["low"], muse["success"]["high"]) == wilson_interval(12, 18)
    assert react["per_type"][TYPES[0]]["success"]["n"] == 9
    # AUROC2: value from the rank formula, interval, distinct episodes
    ci = muse["auroc2_no_adaptation_ci"]
    flat = np.concatenate(probs)
    y = np.repeat(np.array(muse_wins, float), 3)
    assert ci["defined"] and ci["value"] == pytest.approx(auroc2(flat, y)) == muse["auroc2_no_adaptation"]
    assert (ci["positives"], ci["negatives"]) == (12, 6) and ci["low"] <= ci["value"] <= ci["high"]
    assert set(muse["auroc2_no_adaptation_within_type"]["per_type"]) == set(TYPES)
    lci = low["auroc2_no_adaptation_ci"]
    assert low["auroc2_no_adaptation"] is None and not lci["defined"] and lci["reason"] == "n positives = 1 < 5"
    # comparisons: every pair of agents, paired by game
    pairs = [(c["a"], c["b"]) for c in res["comparisons"]]
    assert pairs == [("react", "muse-lowest"), ("react", "muse"), ("muse-lowest", "muse")]  # the tables' order
    c = res["comparisons"][1]
    assert c["n"] == 18 and c["diff"] == pytest.approx(-1 / 6)  # react 9/18, muse 12/18
    assert c["diff"] == compare_paired(react["per_game_success"], muse["per_game_success"]).diff
    assert 0.0 <= c["p_value"] <= 1.0
    md = (tmp_path / "tables.md").read_text()
    assert "undefined (n positives = 1 < 5)" in md and "12 / 6" in md
    assert "67% [44%, 84%] (12/18)" in md  # Wilson of 12/18
    assert "## Paired comparisons: per-game success rate" in md
    assert (tmp_path / "success_rates.png").stat().st_size > 1000
    stored = json.loads((tmp_path / "report.json").read_text())
    assert stored["comparisons"][0]["p_value"] is not None
    # metacognitive accuracy carries its cluster-bootstrap interval
    acc = muse["meta_accuracy_no_adaptation_ci"]
    assert acc["value"] == pytest.approx(muse["meta_accuracy_no_adaptation"]) and acc["low"] <= acc["value"] <= acc["high"]
    # the paper's claims, tested as stated on per-game success; absent agents are named
    claims = {c["claim"]: c for c in res["claims"]}
    assert set(claims) == {"muse >> reflexion > react", "muse > reflexion+sl > reflexion", "muse > muse-random",
                           "muse > muse-lowest"}
    assert claims["muse >> reflexion > react"]["verdict"] == "missing"
    low_part = claims["muse > muse-lowest"]["parts"][0]
    assert low_part["verdict"] == "holds" and low_part["diff"] == pytest.approx(11 / 18)  # 12/18 vs 1/18
    assert "## The paper's claims, tested as stated" in md and "missing (reflexion)" in md


def test_alfworld_report_counts_only_finished_games_of_a_run_in_progress(tmp_path):
    """A run that spans sessions is reported while it plays: a game enters only with all its test
    episodes (its success is their mean), and Table 3 says how far the run is."""
    from metacog_fast.alfworld.report import report

    def run(agent: str, played: dict[int, list[bool]]) -> None:
        d = tmp_path / agent
        (d / "episodes").mkdir(parents=True)
        games = [{"game": f"game{g:02d}", "task_type": TYPES[g % 2]} for g in range(4)]
        (d / "config.json").write_text(json.dumps(
            {"games": games, "config": {"agent": agent, "adapt_episodes": 0, "test_episodes": 2}}))
        for g, wins in played.items():
            (d / "episodes" / f"game{g:02d}").mkdir()
            for k, won in enumerate(wins):
                rec = _alf_record(agent, f"game{g:02d}", TYPES[g % 2], won, None)
                rec["episode"] = k
                (d / "episodes" / f"game{g:02d}" / f"test_{k}.json").write_text(json.dumps(rec))

    run("react", {g: [True, False] for g in range(4)})
    run("muse", {0: [True, True], 1: [False, True], 2: [True]})  # game 2 half played, game 3 not started
    res = report(tmp_path)
    muse, react = res["agents"]["muse"], res["agents"]["react"]
    assert (muse["episodes"], muse["games"], muse["games_planned"], muse["episodes_in_progress"]) == (4, 2, 4, 1)
    assert muse["success"]["n"] == 4 and set(muse["per_game_success"]) == {"game00", "game01"}
    assert (react["episodes"], react["games"], react["episodes_in_progress"]) == (8, 4, 0)
    c = next(c for c in res["comparisons"] if {c["a"], c["b"]} == {"react", "muse"})
    assert c["n"] == 2  # paired on the games both finished
    md = (tmp_path / "tables.md").read_text()
    assert "| 4 (2 of 4 games; run in progress; 1 episode of unfinished games left out) |" in md
    assert "| react | 50% [" in md and "| 8 |" in md


def test_alfworld_selection_counts_and_table():
    """MUSE's room for selection: a step whose rollouts all begin alike gives the scores no choice."""
    from metacog_fast.alfworld.report import render_tables, selection_counts

    same = [[["go to bed 1", "..."]]] * 5
    mixed = [[["go to desk 1", "a"]], [["go to bed 1", "b"], ["look", "c"]], [["go to desk 1", "d"]], [], [["open safe 1", ""]]]
    log = [{"action": "go to bed 1", "rollouts": same},
           {"action": "go to bed 1", "rollouts": mixed},   # not rollout 0's action
           {"action": "go to desk 1", "rollouts": mixed},
           {"action": "look"}]                              # a step without rollouts (not MUSE) is not counted
    c = selection_counts(log)
    assert c == {"steps": 3, "steps_with_choice": 2, "mean_distinct_first_actions": pytest.approx(7 / 3),
                 "steps_not_first_sample": 1}
    assert selection_counts([{"action": "look"}]) is None
    md = render_tables({"muse": {"adapt_episodes": 0, "selection": c}, "react": {"adapt_episodes": 0}})
    assert "## MUSE's selection (test steps)" in md and "| muse | 3 | 2 (67%) | 2.33 | 1 (33%) |" in md
    assert "| react | 3 |" not in md


def test_alfworld_adaptation_effect_and_table():
    """First attempt (adaptation episode 0) against the test episodes, per game, paired."""
    from metacog_fast.alfworld.report import adaptation_effect, render_tables

    def rec(game, phase, episode, won):
        return {"game": game, "phase": phase, "episode": episode, "won": won}

    # (first attempt, test wins of 2): kept, lost once, lost twice, failed and recovered twice, failed twice
    plan = {"g1": (True, 2), "g2": (True, 1), "g3": (True, 0), "g4": (False, 2), "g5": (False, 0)}
    recs = []
    for g, (first, wins) in plan.items():
        recs += [rec(g, "adapt", 0, first), rec(g, "adapt", 1, not first)]  # episode 1 must not count
        recs += [rec(g, "test", 0, wins >= 1), rec(g, "test", 1, wins >= 2)]
    recs.append(rec("g6", "test", 0, True))  # a game without a first attempt is left out
    e = adaptation_effect(recs)
    assert e["games"] == 5
    assert e["first_won"] == {"games": 3, "tests_all_won": 1, "tests_some_won": 1, "tests_none_won": 1}
    assert e["first_failed"] == {"games": 2, "tests_all_won": 1, "tests_some_won": 0, "tests_none_won": 1}
    # per-game test − first: 0, -0.5, -1, +1, 0 -> mean -0.1
    c = e["change"]
    assert c["n"] == 5 and c["diff"] == pytest.approx(-0.1) and c["low"] <= c["diff"] <= c["high"]
    assert adaptation_effect([rec("g", "test", 0, True)]) is None
    md = render_tables({"muse": {"adapt_episodes": 2, "adaptation_effect": e}, "react": {"adapt_episodes": 0}})
    assert "## What adaptation did" in md and "| muse | 5 | 3: 1 / 1 / 1 | 2: 1 / 0 / 1 | -10.0 |" in md
    assert "| react | 5 |" not in md


def _sw_ep(c: str, task: str, v: int, score: float, won: bool) -> dict:
    mech = {k: 0 for k in ("memory_writes", "t1", "t4", "gate1_drops", "gate1_repairs", "critic_calls",
                           "system2_calls", "sage_calls", "invalid_steps")}
    mech.update(swift_steps=5, buffer_steps=5)
    return {"config": c, "task": task, "variation": v, "score": score, "won": won, "steps": 10, "gold_len": 15,
            "mechanisms": mech, "llm_calls": 1, "llm_tokens": 10, "llm_seconds": 1.0, "env_seconds": 1.0,
            "agent_seconds": 0.01}


def test_scienceworld_report_carries_intervals(tmp_path):
    from metacog_fast.scienceworld.report import report
    from metacog_fast.scienceworld.store import write_json

    for c, bonus in (("baseline", 0.0), ("full", 20.0)):
        (tmp_path / "episodes" / c).mkdir(parents=True)
        for t in range(8):
            for v in (1, 2):
                score = 10.0 * t % 50 + bonus + v
                write_json(str(tmp_path / "episodes" / c / f"t{t}__{v}.json"),
                           _sw_ep(c, f"t{t}", v, score, won=score >= 40))
    summary = report(str(tmp_path))
    b, f = summary["baseline"], summary["full"]
    assert "score" in b and "success_pct" in b  # old keys
    assert b["score_interval"]["low"] <= b["score"] <= b["score_interval"]["high"]
    assert f["success"]["n"] == 16 and (f["success"]["low"], f["success"]["high"]) == \
        wilson_interval(f["success"]["successes"], 16)
    rep = json.loads((tmp_path / "report.json").read_text())
    sc = rep["comparisons"]["score"][0]
    assert (sc["a"], sc["b"], sc["n"]) == ("baseline", "full", 8)
    assert sc["diff"] == pytest.approx(-20.0) and sc["p_value"] == 0.0 and sc["high"] < 0
    md = (tmp_path / "tables.md").read_text()
    assert "Paired comparisons: per-task final score" in md and "| baseline | full | -20.00 |" in md
    assert "< 1e-04" in md
    assert (tmp_path / "summary.png").stat().st_size > 1000
    # paper 004's ordering: full >= srm > amm > baseline; srm and amm were not run
    (claim,) = rep["claims"]["score"]
    assert claim["claim"] == "full >= srm > amm > baseline" and claim["verdict"] == "missing"
    assert [p["verdict"] for p in claim["parts"]] == ["missing (srm)", "missing (srm, amm)", "missing (amm)"]
    assert "The paper's ordering, tested as stated: per-task final score" in md


def test_experience_metrics_carry_intervals(tmp_path):
    from metacog_fast.experience.metrics import summarise, write_metrics

    def ep(cond: str, it: int, g: int, won: bool) -> dict:
        return {"condition": cond, "iteration": it, "game_arg": str(g), "game": f"g{g}", "won": won,
                "score": float(won), "subtasks_total": 3, "subtasks_flagged": 2 if won else 1, "retries": 0,
                "replans": 0, "replans_changed": 0, "tokens": 100, "env_actions": 20, "seconds": 1.0}

    eps = [ep("baseline", 0, g, g < 2) for g in range(10)] + [ep("memory", 1, g, g < 8) for g in range(10)]
    m = summarise(eps)
    base, mem = m["rows"]
    assert base["success_rate"] == 0.2 and base["success"] == success_interval([True] * 2 + [False] * 8).to_dict()
    assert mem["subtask_success_interval"]["successes"] == 8 * 2 + 2 * 1 and mem["subtask_success_interval"]["n"] == 30
    (c,) = m["comparisons"]
    assert (c["a"], c["b"], c["n"]) == ("baseline@0", "memory@1", 10) and c["diff"] == pytest.approx(-0.6)
    assert c["p_value"] < 0.05
    write_metrics(m, str(tmp_path))
    md = (tmp_path / "tables.md").read_text()
    assert "20% [6%, 51%] (2/10)" in md and "| baseline@0 | memory@1 | -60.0 |" in md
    assert json.loads((tmp_path / "metrics.json").read_text())["comparisons"][0]["n"] == 10
    assert (tmp_path / "learning_curve.png").stat().st_size > 1000


def test_experience_subtasks_on_task(tmp_path):
    from metacog_fast.experience.metrics import subtasks_on_task, summarise, tables_markdown

    def sub(d: str) -> dict:
        return {"description": d}

    look = {"task": "look at alarmclock under the desklamp.",
            "subtasks": [sub("go to microwave"), sub("go to fridge"), sub("take the AlarmClock 1 from desk 1"),
                         sub("use desklamp 1")]}
    assert subtasks_on_task(look) == (2, 4)
    # words of every task ("put", "clean", "go", ...) are not the task's objects
    put = {"task": "put a clean mug in coffeemachine.", "subtasks": [sub("go to the sinkbasin"), sub("clean it")]}
    assert subtasks_on_task(put) == (0, 2)
    assert subtasks_on_task({"task": "x"}) == (0, 0)
    base = {"condition": "baseline", "iteration": 0, "won": False, "score": 0.0, "subtasks_flagged": 0,
            "retries": 0, "replans": 0, "replans_changed": 0, "tokens": 1, "env_actions": 1, "seconds": 1.0}
    m = summarise([{**base, **look, "game_arg": "0", "subtasks_total": 4},
                   {**base, **put, "game_arg": "1", "subtasks_total": 2}])
    (row,) = m["rows"]
    assert row["subtasks_on_task"] == 2 and row["subtasks_attempted"] == 6
    assert "| 2/6 |" in tables_markdown(m)


def test_sim_ablation_statistics():
    from metacog_fast.town.evaluation import ablation_statistics, ablation_statistics_markdown

    def run(seed: int, alive: int, judge: float) -> dict:
        return {"seed": seed, "judge_mean": judge, "judge_expected": judge + 0.5,
                "metrics": {"alive": alive, "agents": 4, "survival_rate": alive / 4}}

    res = {"all": [run(s, 3, 5.0 + s) for s in range(4)], "memory_only": [run(s, 1, 4.0 + s) for s in range(4)]}
    st = ablation_statistics(res)
    assert st["rates"]["all"]["survival"] == {"rate": 0.75, "low": wilson_interval(12, 16)[0],
                                              "high": wilson_interval(12, 16)[1], "successes": 12, "n": 16, "runs": 4}
    (c,) = st["comparisons"]["survival_rate"]
    assert (c["a"], c["b"], c["n"], c["diff"]) == ("all", "memory_only", 4, 0.5) and c["p_value"] == 0.0
    (j,) = st["comparisons"]["judge_mean"]
    assert j["diff"] == pytest.approx(1.0)
    md = ablation_statistics_markdown(st)
    assert "75% [" in md and "| all | memory_only | +50.0 |" in md and "seeds |" in md
    # each configuration's judge scores carry their interval over seeds
    jm = st["scores"]["all"]["judge_mean"]
    assert jm["mean"] == pytest.approx(6.5) and jm["low"] <= 6.5 <= jm["high"] and jm["n"] == 4
    assert st["scores"]["memory_only"]["judge_expected"]["mean"] == pytest.approx(6.0)
    assert "## Judge scores" in md and "| all | 4 | 6.50 [" in md
    with pytest.raises(ValueError, match="results"):
        ablation_statistics({})


def test_metaworld_tables_and_sa_metrics_carry_intervals():
    from metacog_fast.metaworld.train.report import sa_metrics, table_markdown

    rng = np.random.default_rng(1)
    E, T = 12, 6
    success = np.array([e % 2 for e in range(E)])
    psi = np.clip(rng.random((E * T, 5)) * 0.5 + 0.4 * np.repeat(success, T)[:, None], 0, 1)
    lab = np.repeat(success, T)[:, None] * np.ones((1, 5))
    out = np.repeat(success, T)
    eps = np.repeat(np.arange(E), T).tolist()
    m = sa_metrics(psi, lab, out, eps, [f"task{e % 3}" for e in eps])
    assert m["auroc2_ci"]["defined"] and (m["auroc2_ci"]["positives"], m["auroc2_ci"]["negatives"]) == (6, 6)
    assert m["auroc2"] == pytest.approx(auroc2(psi.sum(-1), out))
    assert set(m["auroc2_within_task"]["per_type"]) == {"task0", "task1", "task2"}
    few = sa_metrics(psi[: 4 * T], lab[: 4 * T], out[: 4 * T], eps[: 4 * T])
    assert np.isnan(few["auroc2"]) and "n positives = 2 < 5" in few["auroc2_note"]
    assert not few["auroc2_ci"]["defined"]
    per_task = {"reach": {"success_rate": 0.5, "success_interval": success_interval([1, 0]).to_dict(),
                          "mean_steps_to_success": 10.0, "solved": True}}
    results = {"MUSE": {"metacognitive_accuracy": 0.6, **m, "tasks_solved": 1, "tasks": 1, "success_rate": 0.5,
                        "success": success_interval([1, 0]).to_dict(), "episodes": 2, "per_task": per_task},
               "Dreamer-v3": {"tasks_solved": 0, "tasks": 1, "success_rate": 0.0,
                              "success": success_interval([0, 0]).to_dict(), "episodes": 2,
                              "per_task": {"reach": {**per_task["reach"], "success_rate": 0.0}}}}
    md = table_markdown(results, [{"a": "MUSE", "b": "Dreamer-v3", "defined": False, "reason": "1 common units < 2",
                                   "n": 1}])
    assert "(6 successful / 6 failed episodes)" in md and "AUROC2 within task" in md
    assert "50% [9%, 91%] (1/2)" in md and "undefined (1 common units < 2)" in md


def test_metaworld_refresh_report_from_results_json(tmp_path):
    from metacog_fast.metaworld.train.report import refresh_report

    def run(succ: list[int], muse: bool) -> dict:
        per_task = {f"t{i}-v3": {"episodes": 10, "successes": k, "success_rate": k / 10, "solved": k > 0,
                                 "mean_steps_to_success": 5.0 if k else float("nan")} for i, k in enumerate(succ)}
        r = {"episodes": 10 * len(succ), "tasks": len(succ), "tasks_solved": sum(k > 0 for k in succ),
             "success_rate": sum(succ) / (10 * len(succ)), "per_task": per_task, "steps_evaluated": 100}
        if muse:
            r.update(metacognitive_accuracy=0.9, auroc2=float("nan"), auroc2_note="undefined: old")
        return r

    (tmp_path / "results.json").write_text(json.dumps({"MUSE": run([2, 1, 0], True), "Dreamer": run([0, 0, 0], False)}))
    res = refresh_report(tmp_path)
    assert res["MUSE"]["success"]["successes"] == 3 and res["MUSE"]["success"]["n"] == 30
    assert res["MUSE"]["per_task"]["t0-v3"]["success_interval"]["high"] == wilson_interval(2, 10)[1]
    assert res["MUSE"]["auroc2"] is None and res["MUSE"]["auroc2_note"] == "undefined: n positives = 3 < 5"
    stored = json.loads((tmp_path / "results.json").read_text())
    assert stored["MUSE"]["tasks_solved"] == 2  # old keys kept
    (c,) = json.loads((tmp_path / "comparisons.json").read_text())["comparisons"]
    assert (c["a"], c["b"], c["n"]) == ("MUSE", "Dreamer", 3) and c["diff"] == pytest.approx(0.1)
    md = (tmp_path / "table1.md").read_text()
    assert "undefined (n positives = 3 < 5)" in md and "10% [3%, 26%] (3/30)" in md
    assert (tmp_path / "success_rates.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="out_dir"):
        refresh_report(tmp_path / "missing")


def test_alfworld_report_tests_the_claims_among_failure_only_reflectors(tmp_path):
    """Runs labelled ``<agent>-onfail`` (``--reflect-on failure``) get the paper's orderings tested
    among themselves; a report without such a run has no such table."""
    from metacog_fast.alfworld.report import report

    def run(label: str, agent: str, wins: list[bool]) -> None:
        d = tmp_path / label
        (d / "episodes").mkdir(parents=True)
        games = [{"game": f"game{g:02d}", "task_type": TYPES[g % 2]} for g in range(len(wins))]
        (d / "config.json").write_text(json.dumps(
            {"games": games, "config": {"agent": agent, "label": label, "adapt_episodes": 0, "test_episodes": 1}}))
        for g, won in enumerate(wins):
            (d / "episodes" / f"game{g:02d}").mkdir()
            rec = _alf_record(agent, f"game{g:02d}", TYPES[g % 2], won, None)
            rec["episode"] = 0
            (d / "episodes" / f"game{g:02d}" / "test_0.json").write_text(json.dumps(rec))

    run("react", "react", [g % 3 == 0 for g in range(24)])
    res = report(tmp_path)
    assert "claims_onfail" not in res and "reflecting only after failures" not in (tmp_path / "tables.md").read_text()
    run("reflexion-onfail", "reflexion", [True] * 24)
    res = report(tmp_path)
    claims = {c["claim"]: c for c in res["claims_onfail"]}
    assert set(claims) == {"muse-onfail >> reflexion-onfail > react",
                           "muse-onfail > reflexion+sl-onfail > reflexion-onfail"}
    first = claims["muse-onfail >> reflexion-onfail > react"]
    assert first["verdict"] == "missing"
    part = first["parts"][1]
    assert (part["a"], part["b"], part["verdict"]) == ("reflexion-onfail", "react", "holds")
    assert part["diff"] == pytest.approx(16 / 24)
    md = (tmp_path / "tables.md").read_text()
    assert "## The same claims among agents reflecting only after failures" in md

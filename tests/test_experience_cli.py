"""``metacog memory show|export|import`` and ``metacog learn`` argument handling."""
from __future__ import annotations

import json

import pytest

from metacog_fast.experience import entries as en
from metacog_fast.experience.cli import parse_games
from metacog_fast.cli.main import main
from metacog_fast.experience.memory import ExperienceMemory


def _mem() -> ExperienceMemory:
    m = ExperienceMemory()
    m.ensure_tools("alfworld")
    m.add_strategic(en.StrategicEntry("many commands have no effect", "read the options first",
                                      en.Provenance("t", "r", "2026-01-01", "llama-cpp://")))
    m.add_sop(en.SOP("alfworld", "heat apple", ["task type: pick_heat"], ["heat apple <n> with microwave <n>"]))
    return m


def test_memory_import_export_show_roundtrip(tmp_path, capsys):
    src = tmp_path / "in.json"
    _mem().export_json(src)
    db = tmp_path / "mem.db"
    assert main(["memory", "import", str(src), str(db)]) == 0
    assert main(["memory", "import", str(src), str(db)]) == 0  # merged, not duplicated
    out = tmp_path / "out.json"
    assert main(["memory", "export", str(db), str(out)]) == 0
    a, b = json.loads(src.read_text()), json.loads(out.read_text())
    assert len(b["strategic"]) == 1 and len(b["procedural"]) == 1
    assert b["procedural"][0]["steps"] == a["procedural"][0]["steps"]
    assert b["strategic"][0]["provenance"] == a["strategic"][0]["provenance"]
    capsys.readouterr()
    assert main(["memory", "show", str(db)]) == 0
    shown = capsys.readouterr().out
    assert "heat apple" in shown and "read the options first" in shown
    with pytest.raises(SystemExit) as exc:  # a usage error: exit 2, one line naming the file
        main(["memory", "show", str(tmp_path / "nope.json")])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("metacog memory: error:") and "nope.json" in err and "\n" not in err


def test_memory_show_of_a_store_open_elsewhere_is_one_line(tmp_path, capsys):
    from metacog_fast.memory import MemoryStore

    db = tmp_path / "mem.db"
    assert main(["memory", "import", str(_export(tmp_path)), str(db)]) == 0
    holder = MemoryStore.open(str(db))  # this process keeps it open: the command is refused, no traceback
    try:
        with pytest.raises(SystemExit) as exc:
            main(["memory", "show", str(db)])
        msg = str(exc.value.code)
        assert msg.startswith("metacog memory: error:") and "already open" in msg and "\n" not in msg
    finally:
        holder.close()


def _export(tmp_path):
    src = tmp_path / "in.json"
    _mem().export_json(src)
    return src


def test_parse_games():
    assert parse_games("0,5,10-12", "alfworld") == ["0", "5", "10", "11", "12"]
    assert parse_games("boil:0,melt:3", "scienceworld") == ["boil:0", "melt:3"]
    with pytest.raises(ValueError, match="bad range"):
        parse_games("5-2", "alfworld")
    with pytest.raises(ValueError, match="no game"):
        parse_games(" , ", "alfworld")

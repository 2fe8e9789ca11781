"""Static descriptions of each action type (tool memory, static part), per environment."""
from __future__ import annotations

ACCESS_GUIDE = "access_guide"
FINISH = "finish"

ALFWORLD_TOOLS: dict[str, str] = {
    "go to": "go to <receptacle>: walk to a place; you see what is on or in it when it is open.",
    "open": "open <receptacle>: open a closed container (fridge, drawer, cabinet, microwave, safe).",
    "close": "close <receptacle>: close an open container.",
    "take": "take <object> from <receptacle>: pick an object up; you can hold one object at a time.",
    "move": "move <object> to <receptacle>: put the held object in or on a receptacle.",
    "put": "put <object> in/on <receptacle>: put the held object in or on a receptacle.",
    "heat": "heat <object> with <microwave>: heat the held object; stand at the microwave.",
    "cool": "cool <object> with <fridge>: cool the held object; stand at the fridge.",
    "clean": "clean <object> with <sinkbasin>: clean the held object; stand at the sink.",
    "use": "use <lamp>: switch a lamp on (to look at something under its light).",
    "toggle": "toggle <object>: switch a device on or off.",
    "slice": "slice <object> with <knife>: cut an object while holding a knife.",
    "examine": "examine <thing>: describe it closely.",
    "look": "look: describe where you are and what is around (checks the state).",
    "inventory": "inventory: list what you hold (checks the state).",
    ACCESS_GUIDE: "access_guide <skill>: read the stored procedure for a skill from the procedure index.",
    FINISH: "finish: declare the current sub-task complete (it will be checked against what you observed).",
}

SCIENCEWORLD_TOOLS: dict[str, str] = {
    "go to": "go to <location>: move to a connected room (open doors first).",
    "open": "open <thing>: open a door or container.",
    "close": "close <thing>: close a door or container.",
    "pick up": "pick up <thing>: put it into your inventory.",
    "move": "move <thing> to <container>: place something somewhere.",
    "activate": "activate <device>: switch a device on.",
    "deactivate": "deactivate <device>: switch a device off.",
    "focus on": "focus on <thing>: mark the task's object (a wrong focus can end the task).",
    "look around": "look around: describe the room (checks the state).",
    "look at": "look at <thing>: describe one thing.",
    "inventory": "inventory: list what you carry (checks the state).",
    "use": "use <thing> on <thing>: apply one thing to another.",
    "pour": "pour <thing> into <container>.",
    "wait": "wait: let time pass.",
    ACCESS_GUIDE: ALFWORLD_TOOLS[ACCESS_GUIDE],
    FINISH: ALFWORLD_TOOLS[FINISH],
}

ENV_TOOLS = {"alfworld": ALFWORLD_TOOLS, "scienceworld": SCIENCEWORLD_TOOLS}

VERIFY_ACTIONS = {"alfworld": ("look", "inventory"), "scienceworld": ("look around", "inventory")}


def action_type(env: str, command: str) -> str:
    """The tool a command uses: the longest tool name the command starts with ("" if none)."""
    c = command.strip().lower()
    best = ""
    for name in ENV_TOOLS.get(env, ALFWORLD_TOOLS):
        if (c == name or c.startswith(name + " ")) and len(name) > len(best):
            best = name
    return best

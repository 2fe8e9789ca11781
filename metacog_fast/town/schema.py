"""JSON schemas of world and scenario files, and validation with errors that name
the file, the field (as a JSON path like ``agents[2].goal``) and what was expected."""
from __future__ import annotations

from typing import Any

import jsonschema

_INT = {"type": "integer"}
_POS_INT = {"type": "integer", "minimum": 1}
_STR = {"type": "string"}
_NAME = {"type": "string", "minLength": 1}
_BOUNDS = {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 4, "maxItems": 4}
_XY = {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 2, "maxItems": 2}

_AREA = {
    "type": "object",
    "required": ["name", "bounds"],
    "additionalProperties": False,
    "properties": {"name": _NAME, "bounds": _BOUNDS, "description": _STR},
}

WORLD_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "metacog_fast sim world",
    "type": "object",
    "required": ["width", "height", "locations"],
    "additionalProperties": False,
    "properties": {
        "name": _NAME,
        "description": _STR,
        "width": {"type": "integer", "minimum": 2, "maximum": 1024},
        "height": {"type": "integer", "minimum": 2, "maximum": 1024},
        "map": {"type": "array", "items": {"type": "string"}, "description": "rows, '#' = wall"},
        "walls": {"type": "array", "items": _BOUNDS},
        "locations": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "bounds"],
                "additionalProperties": False,
                "properties": {
                    "name": _NAME,
                    "bounds": _BOUNDS,
                    "description": _STR,
                    "rooms": {"type": "array", "items": _AREA},
                },
            },
        },
        "objects": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "pos"],
                "additionalProperties": False,
                "properties": {
                    "name": _NAME,
                    "pos": _XY,
                    "actions": {"type": "array", "items": _NAME, "minItems": 1},
                    "description": _STR,
                },
            },
        },
    },
}

_AGENT = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": _NAME,
        "description": _STR,
        "personality": _STR,
        "goal": _STR,
        "location": _NAME,
        "position": _XY,
        "role": _NAME,
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
    },
}

SCENARIO_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "metacog_fast sim scenario",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": _NAME,
        "description": _STR,
        "world": _NAME,
        "steps": _POS_INT,
        "seconds_per_step": {"type": "number", "exclusiveMinimum": 0},
        "start_time": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?$"},
        "seed": _INT,
        "perception_range": {"type": "number", "exclusiveMinimum": 0},
        "agent_speed": _POS_INT,
        "num_agents": {"type": "integer", "minimum": 1, "maximum": 500},
        "agent_defaults": _AGENT,
        "agents": {"type": "array", "items": _AGENT},
        "meta_questions": {"type": "array", "items": _NAME},
        "interview_questions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["question"],
                "additionalProperties": False,
                "properties": {
                    "question": _NAME,
                    "agents": {"type": "array", "items": _NAME},
                    "answer": {"enum": ["text", "agents", "scale", "yesno"]},
                },
            },
        },
        "rules": {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["none", "zombie", "party", "mystery"]}}},
    },
}

RULE_SCHEMAS: dict[str, dict[str, Any]] = {
    "none": {"type": "object", "additionalProperties": False, "properties": {"type": _STR}},
    "zombie": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "type": _STR,
            "zombies": {"type": "integer", "minimum": 0, "maximum": 500},
            "zombie_range": {"type": "number", "exclusiveMinimum": 0},
            "kill_range": {"type": "number", "minimum": 0},
            "zombie_speed": _POS_INT,
            "zombie_free": {"type": "array", "items": _NAME},
            "zombie_start": {"type": "array", "items": _NAME},
        },
    },
    "party": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "type": _STR,
            "host": _NAME,
            "location": _NAME,
            "start_step": {"type": "integer", "minimum": 0},
            "duration_steps": _POS_INT,
            "invited": {"type": "array", "items": _NAME},
        },
    },
    "mystery": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "type": _STR,
            "murderer": _NAME,
            "detective": _NAME,
            "kill_cooldown": {"type": "integer", "minimum": 0},
            "kill_range": {"type": "number", "minimum": 0},
        },
    },
}


class SchemaError(ValueError):
    """A world or scenario file does not match its schema (message: file, field, expectation)."""

    def __init__(self, source: str, field: str, expected: str) -> None:
        self.source, self.field, self.expected = source, field, expected
        super().__init__(f"{source}: field {field}: {expected}")


def json_path(parts: Any) -> str:
    """``['agents', 2, 'goal']`` -> ``agents[2].goal`` (``<root>`` for the document itself)."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<root>"


def _expectation(err: jsonschema.ValidationError) -> str:
    v, s = err.validator, err.validator_value
    got = f"got {err.instance!r}" if not isinstance(err.instance, (dict, list)) else f"got {type(err.instance).__name__}"
    if v == "type":
        return f"expected {s}, {got}"
    if v == "required":
        missing = [r for r in s if isinstance(err.instance, dict) and r not in err.instance]
        return f"missing required field(s) {missing}"
    if v == "additionalProperties":
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
        return f"unknown field(s) {extra}; allowed: {sorted(err.schema.get('properties', {}))}"
    if v == "enum":
        return f"expected one of {s}, {got}"
    if v in ("minimum", "exclusiveMinimum", "maximum"):
        return f"expected a number with {v} {s}, {got}"
    if v in ("minItems", "maxItems"):
        return f"expected an array with {v} {s}, got {len(err.instance)} items"
    if v == "minLength":
        return f"expected a non-empty string, {got}"
    if v == "pattern":
        return f"expected a string matching {s} (e.g. 2024-12-24T17:00), {got}"
    return err.message


def validate(doc: Any, schema: dict[str, Any], source: str, prefix: tuple = ()) -> None:
    """Raise :class:`SchemaError` for the first (deepest, most specific) violation, if any."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(doc), key=lambda e: (-len(e.absolute_path), json_path(e.absolute_path)))
    if errors:
        e = errors[0]
        raise SchemaError(source, json_path(prefix + tuple(e.absolute_path)), _expectation(e))

"""GBNF grammar for "exactly one of these strings" (llama.cpp constrained decoding)."""
from __future__ import annotations

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def gbnf_literal(s: str) -> str:
    """``s`` as a GBNF string literal; control characters become ``\\xNN``."""
    out = []
    for ch in s:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def choice_grammar(choices: list[str]) -> str:
    """A GBNF grammar whose language is exactly ``choices``."""
    return "root ::= " + " | ".join(gbnf_literal(c) for c in choices) + "\n"

"""Go's ``encoding/json`` output, byte for byte, for the CheckCodes computed over it."""

from __future__ import annotations

import json

_GO_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def go_json(value: object) -> str:
    """Go's ``json.Marshal`` of maps (sorted keys), lists, strings, ints and bools."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    for raw, escaped in _GO_ESCAPES.items():
        text = text.replace(raw, escaped)
    return text

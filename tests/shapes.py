"""A JSON schema and two function tools that the structured-output and tool tests share, in each API's shape."""

from __future__ import annotations

from typing import Any

CITY: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 24},
        "coastal": {"type": "boolean"},
        "size": {"type": "string", "enum": ["village", "town", "city"]},
    },
    "required": ["city", "coastal", "size"],
    "additionalProperties": False,
}
# Bare functions, as the playground's tools box also takes them.
WEATHER_FUNCTION: dict[str, Any] = {
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 24},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
}
CLOCK_FUNCTION: dict[str, Any] = {
    "name": "get_time",
    "parameters": {
        "type": "object",
        "properties": {"zone": {"type": "string", "enum": ["UTC", "CET", "PST"]}},
        "required": ["zone"],
        "additionalProperties": False,
    },
}


def chat_tool(function: dict[str, Any]) -> dict[str, Any]:
    """A function as Chat Completions' `tools` take it."""
    return {"type": "function", "function": function}


def responses_tool(function: dict[str, Any]) -> dict[str, Any]:
    """A function as the Responses API's `tools` take it: flat, and strict."""
    return {"type": "function", **function, "strict": True}

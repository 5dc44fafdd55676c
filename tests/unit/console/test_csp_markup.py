"""What the content security policy would refuse, found in the source before a browser does: inline scripts,
styles and event handlers, javascript: URLs and evaluated htmx expressions in the templates; eval and script
blobs in the console's own scripts; and htmx's configuration, which must not inject a style element."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
TEMPLATES = sorted((REPO / "templates").rglob("*.jinja2"))
SCRIPTS = sorted(p for p in (REPO / "static").glob("*.js") if not p.name.startswith("htmx-"))

REFUSED_MARKUP = {
    "inline script": re.compile(r"<script\b(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE),
    "style element": re.compile(r"<style\b", re.IGNORECASE),
    "style attribute": re.compile(r"\sstyle\s*=", re.IGNORECASE),
    "inline event handler": re.compile(r"\son[a-z]+\s*=", re.IGNORECASE),
    "javascript: URL": re.compile(r"javascript:", re.IGNORECASE),
    "htmx event handler (hx-on)": re.compile(r"\s(data-)?hx-on", re.IGNORECASE),
    "evaluated htmx values": re.compile(r"hx-va(ls|rs)\s*=\s*['\"]\s*js:", re.IGNORECASE),
    "htmx trigger filter (evaluated)": re.compile(r"hx-trigger\s*=\s*\"[^\"]*\[", re.IGNORECASE),
}
REFUSED_SCRIPT = {
    "eval": re.compile(r"\beval\s*\("),
    "new Function": re.compile(r"\bnew\s+Function\b|\bFunction\s*\(\s*['\"]"),
    "string timer": re.compile(r"set(Timeout|Interval)\s*\(\s*['\"]"),
    "script from a blob": re.compile(r"new\s+Blob\([^)]*javascript", re.IGNORECASE | re.DOTALL),
    "style attribute": re.compile(r"setAttribute\(\s*['\"]style['\"]|\.style\.cssText|insertAdjacentHTML"),
    "inline handler attribute": re.compile(r"setAttribute\(\s*['\"]on[a-z]+['\"]"),
}


def _strip_jinja_comments(text: str) -> str:
    return re.sub(r"\{#.*?#\}", "", text, flags=re.DOTALL)


def test_there_is_something_to_scan():
    assert len(TEMPLATES) >= 10
    assert {p.name for p in SCRIPTS} >= {"console.js", "playground.js", "recorder.js", "recorder-worklet.js"}


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: str(p.relative_to(REPO / "templates")))
def test_templates_hold_nothing_the_policy_refuses(template):
    text = _strip_jinja_comments(template.read_text())
    found = [f"{what}: {m.group(0).strip()!r}" for what, rx in REFUSED_MARKUP.items() for m in rx.finditer(text)]
    assert found == []


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_console_scripts_evaluate_no_strings_and_set_no_inline_styles(script):
    text = script.read_text()
    found = [f"{what}: {m.group(0)!r}" for what, rx in REFUSED_SCRIPT.items() for m in rx.finditer(text)]
    assert found == []


def test_every_script_a_template_loads_is_a_static_file():
    for template in TEMPLATES:
        for src in re.findall(r"<script\b[^>]*\bsrc=\"([^\"]+)\"", template.read_text()):
            assert src.startswith("/static/"), (template.name, src)
            assert (REPO / src.lstrip("/")).is_file(), (template.name, src)


def test_htmx_is_configured_for_the_policy():
    base = (REPO / "templates" / "base.html.jinja2").read_text()
    meta = re.search(r"<meta name=\"htmx-config\" content='([^']*)'>", base)
    assert meta is not None
    config = json.loads(meta.group(1))
    assert config["includeIndicatorStyles"] is False  # else htmx adds a <style> element, which style-src refuses
    assert config["allowEval"] is False
    assert config["allowScriptTags"] is False
    # Settling copies these attributes from a swapped-out element with setAttribute, which style-src refuses for
    # `style` (one left behind by anything that touched element.style would be a violation on every swap).
    assert "style" not in config["attributesToSettle"]
    css = (REPO / "static" / "console.css").read_text()
    assert ".htmx-indicator" in css
    assert ".htmx-request .htmx-indicator" in css

"""The one home of the HTML pages: a Jinja2 environment with autoescaping (every string from
a run - paths, config values, class names - shows as text, never as markup) and figures
inlined as SVG, so a page opens from a laptop after ``scp`` with no network."""

from __future__ import annotations

import io
import re
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from bigearthnet.core import display
from bigearthnet.core.util import atomic_write_text


@cache
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("bigearthnet.pages", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a misspelt field fails the writer, not the reader
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.globals["show"] = display  # every page shows numbers and paths alike
    return environment


def render(template: str, **context: Any) -> str:
    return _environment().get_template(template).render(**context)


def write_page(path: Path, template: str, **context: Any) -> Path:
    """Render and write atomically (a half-written page never carries the final name)."""
    atomic_write_text(path, render(template, **context))
    return path


def svg(figure: Any, *, title: str = "") -> Markup:
    """A matplotlib figure as inline SVG markup (text kept as text, so it stays searchable
    and sharp; matplotlib escapes the strings it draws)."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buffer.getvalue()
    text = text[text.index("<svg") :]  # drop the XML declaration and doctype
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
    if title:
        label = Markup(' role="img" aria-label="{}"').format(title)
        text = text.replace("<svg", f"<svg{label}", 1)
    return Markup(text)

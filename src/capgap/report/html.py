"""The self-contained report.html rendered from report.md."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import markdown

HTML_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;line-height:1.45}"
    "table{border-collapse:collapse;margin:1em 0;font-size:.85em}th,td{border:1px solid #ccc;padding:3px 6px}"
    "th{background:#f3f3f3}img{max-width:100%}code{background:#f6f6f6}"
)


def render_html(md: str, base: str | Path, title: str = "capgap report") -> str:
    """A self-contained HTML page from the report's Markdown: every ``![alt](path)`` image
    (relative to ``base``) is embedded as a base64 ``data:`` URI, so the page opens offline.

    Raises ``FileNotFoundError`` when a referenced figure is missing."""

    def embed(m):
        alt, path = m.group(1), m.group(2)
        data = base64.b64encode((Path(base) / path).read_bytes()).decode("ascii")
        return f"![{alt}](data:image/png;base64,{data})"

    body = markdown.markdown(re.sub(r"!\[([^\]]*)\]\(([^)\s]+\.png)\)", embed, md), extensions=["tables"])
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f"<style>{HTML_STYLE}</style></head><body>\n{body}\n</body></html>\n"
    )

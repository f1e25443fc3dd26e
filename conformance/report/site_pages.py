"""The HTML of the auditor's site: one function per kind of page, every text escaped, every link relative.

Theory of operation: a page is built by `Page(path)`, whose `href(target)` turns a site path ("actions/Crash.html",
"variables.html#var-msgs") into a link relative to the page, so the site opens from disk with no server. The data
comes from conformance/report/site.py (`SiteData`); nothing here reads a file. All text goes through `esc`; the only
markup is the markup written here. The pages are plain HTML with one stylesheet (`CSS`), no script.
"""

from __future__ import annotations

import html
import posixpath
import re
from pathlib import Path

__all__ = ["CSS", "Page", "esc", "layout", "code_block", "source_page"]

esc = html.escape

CSS = """
body { font-family: system-ui, sans-serif; margin: 0 auto; max-width: 110em; padding: 0 1.5em 3em; color: #222; }
nav { padding: .6em 0; border-bottom: 1px solid #ccc; margin-bottom: 1em; }
nav a { margin-right: 1.2em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; } h3 { font-size: 1.05em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #ccc; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
pre { background: #f8f8f8; border: 1px solid #ddd; padding: .5em; overflow-x: auto; font-size: 12px;
      line-height: 1.35; margin: .3em 0; }
.side { display: grid; grid-template-columns: 1fr 1fr; gap: 1em; }
.side > div { min-width: 0; }
.ln { color: #999; user-select: none; display: inline-block; width: 3.5em; text-align: right; margin-right: .8em; }
blockquote { border-left: 4px solid #9ab; margin: .4em 0; padding: .2em .8em; background: #f4f8fb; }
.problem { background: #fde8e8; border: 1px solid #e99; padding: .5em 1em; }
.ok { background: #e8f6e8; border: 1px solid #9c9; padding: .5em 1em; }
.swatch { display: inline-block; width: 1.4em; height: .9em; vertical-align: middle; border: 1px solid #999; }
.muted { color: #666; } code { font-size: 90%; }
.src span:target, .src div:target { background: #fff3b0; }
img.graph { max-width: 100%; border: 1px solid #ddd; }
"""


class Page:
    """A page at site path `path`; `href` makes links relative to it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def href(self, target: str) -> str:
        base, _, anchor = target.partition("#")
        rel = posixpath.relpath(base, posixpath.dirname(self.path) or ".") if base else ""
        return esc(rel + (f"#{anchor}" if anchor else ""))

    def a(self, target: str, text: str) -> str:
        return f'<a href="{self.href(target)}">{esc(text)}</a>'


NAV = [("index.html", "Overview"), ("index.html#actions", "Actions"), ("variables.html", "Variables"),
       ("index.html#invariants", "Invariants"), ("index.html#traces", "Traces"), ("graph.html", "State graph"),
       ("src/spec/Zab.tla.html", "Zab.tla")]


def layout(page: Page, title: str, body: str) -> str:
    nav = "".join(page.a(t, label) for t, label in NAV)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)} - zabref audit'
            f'</title><link rel="stylesheet" href="{page.href("style.css")}"></head>\n<body><nav>{nav}</nav>\n'
            f"<h1>{esc(title)}</h1>\n{body}\n</body></html>\n")


def code_block(text: str, first_line: int | None = None) -> str:
    """A <pre> of source text, with line numbers when first_line is given."""
    if first_line is None:
        return f"<pre>{esc(text)}</pre>"
    rows = [f'<span class="ln">{first_line + k}</span>{esc(line)}' for k, line in enumerate(text.splitlines())]
    return "<pre>" + "\n".join(rows) + "</pre>"


def source_page(page: Page, rel: str, text: str, title_note: str = "") -> str:
    """A whole file, every line anchored as #L<n>."""
    rows = [f'<span id="L{k}"><span class="ln">{k}</span>{esc(line)}</span>'
            for k, line in enumerate(text.splitlines(), 1)]
    body = (f'<p class="muted">{esc(title_note)}</p>' if title_note else "") + \
        '<pre class="src">' + "\n".join(rows) + "</pre>"
    return layout(page, rel, body)


def src_target(rel: str, line: int | None = None) -> str:
    """The site path of a source file's page (and line anchor)."""
    return f"src/{rel}.html" + (f"#L{line}" if line else "")


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def shown_path(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` (as the site names files), or whole when it is outside."""
    try:
        return Path(path).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)

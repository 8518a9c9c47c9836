"""The page's building blocks: a self-contained HTML document, tables, importance bars and inline figures.

Nothing here loads anything from elsewhere: the style sheet and the one small search script are inline,
figures are SVG (text drawn in the reader's own sans-serif font) or base64 PNG ``data:`` URLs.
"""

from __future__ import annotations

import base64
import html
import io
import math

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { padding: .15em .6em; text-align: left; vertical-align: top; border-bottom: 1px solid #eee; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #555; max-width: 60em; }
td.bar { width: 12em; } td.bar i { display: block; height: .8em; margin-top: .25em; }
i.p { background: #2a7; } i.m { background: #d54; }
details { border-bottom: 1px solid #eee; padding: .3em 0; } summary { cursor: pointer; }
details table { margin-left: 1.5em; } .side { color: #555; font-style: italic; }
table.u th { font-weight: normal; } table.u tr.rec th { font-weight: bold; padding-top: .6em; }
table.u td:first-child { padding-left: 1.5em; } table.u td:nth-child(2), table.u td:nth-child(4) { text-align: right; }
figure { margin: 1em 0; } svg { max-width: 100%; height: auto; }
input[type=search] { font-size: 1em; padding: .3em; width: 24em; }
"""

# Hides the users whose text does not contain the query; without JavaScript every user stays listed.
SEARCH_SCRIPT = """
document.getElementById('search').addEventListener('input', function () {
  var q = this.value.toLowerCase();
  document.querySelectorAll('details[data-search]').forEach(function (d) {
    d.hidden = q && d.dataset.search.indexOf(q) < 0;
  });
});
"""


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def number(value) -> str:
    """A value as the page shows it: 4 significant digits for floats, as is otherwise."""
    if isinstance(value, float):
        return "—" if math.isnan(value) else f"{value:.4g}"
    if value is None or value == {}:  # nothing measured (e.g. no worker processes in an in-memory run)
        return "—"
    return str(value)


def data_value(value) -> str:
    """A value as a ``data-value`` attribute carries it, exactly: a test reads the page's numbers back."""
    return repr(value) if isinstance(value, float) else str(value)


def page(title: str, body: str, script: str = "") -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        f"<style>{STYLE}</style></head>\n<body>\n<h1>{esc(title)}</h1>\n{body}\n"
        + (f"<script>{script}</script>\n" if script else "")
        + "</body></html>\n"
    )


def key_value_table(rows: list[tuple[str, str, object]], table_id: str) -> str:
    """A two-column table of (key, label, value); each value cell carries its key and exact value."""
    cells = "".join(
        f'<tr><th>{esc(label)}</th><td{_numeric(v)} data-key="{esc(key)}" data-value="{esc(data_value(v))}">'
        f"{esc(number(v))}</td></tr>\n"
        for key, label, v in rows
    )
    return f'<table id="{esc(table_id)}">\n{cells}</table>'


def _numeric(value) -> str:
    """The class of a cell holding ``value``: numbers right-aligned, text (paths, names) as it reads."""
    return ' class="n"' if isinstance(value, (int, float)) and not isinstance(value, bool) else ""


def grid(header: list[str], rows: list[list], table_id: str | None = None) -> str:
    """A plain table: a header row, then one row per list of cells (numbers right-aligned)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td{_numeric(c)}>{esc(number(c))}</td>" for c in r) + "</tr>\n" for r in rows)
    attrs = f' id="{esc(table_id)}"' if table_id else ""
    return f"<table{attrs}><tr>{head}</tr>\n{body}</table>"


def bar(value: float, scale: float) -> str:
    """A bar of ``|value| / scale`` of the column's width, green for a positive value, red for a negative one."""
    width = 100 * min(abs(value) / scale, 1.0) if scale > 0 else 0.0
    return f'<td class=bar><i class={"p" if value >= 0 else "m"} style="width:{width:.0f}%"></i>'


def svg(fig) -> str:
    """A matplotlib figure as an inline ``<svg>`` element (the figure is closed)."""
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]  # the XML prolog and doctype are not allowed inside HTML


def png(data: bytes, alt: str) -> str:
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'


def pyplot():
    """matplotlib's pyplot on the file-less Agg backend, text left as text in SVG (no embedded glyphs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "dxplain", "font.size": 9})
    return plt

"""SVG axis labels are cut to length before they are escaped: never half an HTML entity."""

from __future__ import annotations

import re
from xml.etree import ElementTree

import pytest

from dtype_doctor.render.svg import render_plot


@pytest.mark.parametrize("kind", ["bar", "line"])
def test_long_label_with_markup_is_cut_then_escaped(kind):
    label = "a" * 10 + "<&>" * 10  # escaping first would put a cut inside '&amp;'
    plot = {"title": "t", "kind": kind, "x": [label, "b"], "series": {"s": [1.0, 2.0]}}
    svg = render_plot(plot)
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    shown = [t for t in texts if "&lt;" in t]  # cut at either end, escaped after
    assert shown, svg
    for text in shown:
        assert not re.search(r"&(?![a-z]+;|#\d+;)", text), text  # every '&' starts a whole entity
    # the whole chart is well-formed XML: a half entity would break the parse
    body = svg[svg.index("<svg") : svg.index("</svg>") + len("</svg>")]
    ElementTree.fromstring(body)

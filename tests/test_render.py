from __future__ import annotations

import asyncio
import dataclasses
import re
import runpy
import sys
from pathlib import Path
from typing import Any

import pytest
from inline_snapshot import snapshot
from pydantic_ai import (
    Agent,
    Citation,
    ContentCitationAnchor,
    DocumentCitationSource,
    MarkerCitationAnchor,
    ModelResponse,
    TextPart,
    WebCitationSource,
)
from pydantic_ai.exceptions import UserError

from pydantic_ai_citations import CitedAnswer, CitedSpan, render_html, render_markdown
from pydantic_ai_citations._render import safe_url, url_problems
from pydantic_ai_citations.testing import CITING_STYLES, CitingModel, CitingStyle, ScriptedCitation

TEXT = 'K2 is 8,611 m tall. It lies on the China–Pakistan border.'
WIKI = WebCitationSource('https://en.wikipedia.org/wiki/K2', title='K2 - Wikipedia')
BORDER = WebCitationSource('https://example.com/border (map)', title='Border [map]')
REPORT = DocumentCitationSource(document_id='file_1', title='Survey report', excerpts=['K2 was measured at 8,611 m.'])


def _style_answer(style: CitingStyle) -> CitedAnswer:
    citations = [ScriptedCitation('K2 is 8,611 m tall.', [WIKI]), ScriptedCitation('China–Pakistan border', [BORDER])]
    # `asyncio.run` closes its loop (`run_sync` would leave one open for the next test to trip over).
    result = asyncio.run(Agent(CitingModel(TEXT, citations, style=style)).run('How tall is K2?'))
    return CitedAnswer.from_result(result)


def _answer(text: str, *citations: Citation, complete: bool = True) -> CitedAnswer:
    response = ModelResponse(parts=[TextPart(text, citations=list(citations) or None, provider_name='test')])
    return CitedAnswer.from_messages([response], complete=complete)


def content(start: int, end: int, *sources: WebCitationSource | DocumentCitationSource) -> Citation:
    return Citation(list(sources), anchor=ContentCitationAnchor(start=start, end=end))


def marker(start: int, end: int, *sources: WebCitationSource | DocumentCitationSource) -> Citation:
    return Citation(list(sources), anchor=MarkerCitationAnchor(start=start, end=end))


def web(n: int) -> WebCitationSource:
    return WebCitationSource(f'https://s{n}.example/page', title=f'Source {n}')


def test_markdown_inline_each_style():
    rendered = {style: render_markdown(_style_answer(style)) for style in CITING_STYLES}
    assert rendered == snapshot(
        {
            'anthropic': 'K2 is 8,611 m tall.[[1]](https://en.wikipedia.org/wiki/K2) It lies on the China–Pakistan border[[2]](https://example.com/border%20%28map%29).\n',
            'bedrock': 'K2 is 8,611 m tall.[[1]](https://en.wikipedia.org/wiki/K2) It lies on the China–Pakistan border[[2]](https://example.com/border%20%28map%29).\n',
            'openai-responses': 'K2 is 8,611 m tall. [[1]](https://en.wikipedia.org/wiki/K2) It lies on the China–Pakistan border [[2]](https://example.com/border%20%28map%29).\n',
            'openai-chat': 'K2 is 8,611 m tall. [[1]](https://en.wikipedia.org/wiki/K2) It lies on the China–Pakistan border [[2]](https://example.com/border%20%28map%29).\n',
            'openrouter': """\
K2 is 8,611 m tall. It lies on the China–Pakistan border.

**Sources used**

- \\[1\\] [K2 - Wikipedia](https://en.wikipedia.org/wiki/K2) (en.wikipedia.org) — “K2 is 8,611 m tall.”
- \\[2\\] [Border \\[map\\]](https://example.com/border%20%28map%29) (example.com) — “China–Pakistan border”
""",
            'google': 'K2 is 8,611 m tall.[[1]](https://en.wikipedia.org/wiki/K2) It lies on the China–Pakistan border[[2]](https://example.com/border%20%28map%29).\n',
            'xai': 'K2 is 8,611 m tall. [[1]](https://en.wikipedia.org/wiki/K2) It lies on the China–Pakistan border [[2]](https://example.com/border%20%28map%29).\n',
        }
    )


def test_markdown_footnotes_each_style():
    rendered = {style: render_markdown(_style_answer(style), 'footnotes') for style in CITING_STYLES}
    assert rendered == snapshot(
        {
            'anthropic': """\
K2 is 8,611 m tall.[^1] It lies on the China–Pakistan border[^2].

[^1]: [K2 - Wikipedia](https://en.wikipedia.org/wiki/K2) (en.wikipedia.org) — “K2 is 8,611 m tall.”
[^2]: [Border \\[map\\]](https://example.com/border%20%28map%29) (example.com) — “China–Pakistan border”
""",
            'bedrock': """\
K2 is 8,611 m tall.[^1] It lies on the China–Pakistan border[^2].

[^1]: [en.wikipedia.org](https://en.wikipedia.org/wiki/K2)
[^2]: [example.com](https://example.com/border%20%28map%29)
""",
            'openai-responses': """\
K2 is 8,611 m tall. [^1] It lies on the China–Pakistan border [^2].

[^1]: [K2 - Wikipedia](https://en.wikipedia.org/wiki/K2) (en.wikipedia.org)
[^2]: [Border \\[map\\]](https://example.com/border%20%28map%29) (example.com)
""",
            'openai-chat': """\
K2 is 8,611 m tall. [^1] It lies on the China–Pakistan border [^2].

[^1]: [K2 - Wikipedia](https://en.wikipedia.org/wiki/K2) (en.wikipedia.org)
[^2]: [Border \\[map\\]](https://example.com/border%20%28map%29) (example.com)
""",
            'openrouter': """\
K2 is 8,611 m tall. It lies on the China–Pakistan border.

**Sources used**

- \\[1\\] [K2 - Wikipedia](https://en.wikipedia.org/wiki/K2) (en.wikipedia.org) — “K2 is 8,611 m tall.”
- \\[2\\] [Border \\[map\\]](https://example.com/border%20%28map%29) (example.com) — “China–Pakistan border”
""",
            'google': """\
K2 is 8,611 m tall.[^1] It lies on the China–Pakistan border[^2].

[^1]: [K2 - Wikipedia](https://en.wikipedia.org/wiki/K2) (en.wikipedia.org)
[^2]: [Border \\[map\\]](https://example.com/border%20%28map%29) (example.com)
""",
            'xai': """\
K2 is 8,611 m tall. [^1] It lies on the China–Pakistan border [^2].

[^1]: [en.wikipedia.org](https://en.wikipedia.org/wiki/K2)
[^2]: [example.com](https://example.com/border%20%28map%29)
""",
        }
    )


def test_html_each_style():
    rendered = {style: render_html(_style_answer(style)) for style in CITING_STYLES}
    assert rendered == snapshot(
        {
            'anthropic': """\
<article class="cited-answer" style="font-family:system-ui,sans-serif;line-height:1.5;max-width:48em">
<div class="cited-answer-text" style="white-space:pre-wrap">K2 is 8,611 m tall.<sup class="cite"><a class="cite-mark" href="https://en.wikipedia.org/wiki/K2" rel="noopener noreferrer nofollow" target="_blank" title="K2 - Wikipedia (en.wikipedia.org)">[1]</a></sup> It lies on the China–Pakistan border<sup class="cite"><a class="cite-mark" href="https://example.com/border (map)" rel="noopener noreferrer nofollow" target="_blank" title="Border [map] (example.com)">[2]</a></sup>.</div>
<section class="cited-answer-sources"><h2 style="font-size:1em">Sources</h2><ol style="padding-left:2em"><li value="1" id="cite-source-1"><a href="https://en.wikipedia.org/wiki/K2" rel="noopener noreferrer nofollow" target="_blank">K2 - Wikipedia</a> <span class="cite-note" style="color:#555">(en.wikipedia.org)</span><blockquote class="cite-excerpt" style="margin:0.25em 0 0.5em 1em;color:#444">K2 is 8,611 m tall.</blockquote></li><li value="2" id="cite-source-2"><a href="https://example.com/border (map)" rel="noopener noreferrer nofollow" target="_blank">Border [map]</a> <span class="cite-note" style="color:#555">(example.com)</span><blockquote class="cite-excerpt" style="margin:0.25em 0 0.5em 1em;color:#444">China–Pakistan border</blockquote></li></ol></section>
</article>
""",
            'bedrock': """\
<article class="cited-answer" style="font-family:system-ui,sans-serif;line-height:1.5;max-width:48em">
<div class="cited-answer-text" style="white-space:pre-wrap">K2 is 8,611 m tall.<sup class="cite"><a class="cite-mark" href="https://en.wikipedia.org/wiki/K2" rel="noopener noreferrer nofollow" target="_blank" title="en.wikipedia.org">[1]</a></sup> It lies on the China–Pakistan border<sup class="cite"><a class="cite-mark" href="https://example.com/border (map)" rel="noopener noreferrer nofollow" target="_blank" title="example.com">[2]</a></sup>.</div>
<section class="cited-answer-sources"><h2 style="font-size:1em">Sources</h2><ol style="padding-left:2em"><li value="1" id="cite-source-1"><a href="https://en.wikipedia.org/wiki/K2" rel="noopener noreferrer nofollow" target="_blank">en.wikipedia.org</a></li><li value="2" id="cite-source-2"><a href="https://example.com/border (map)" rel="noopener noreferrer nofollow" target="_blank">example.com</a></li></ol></section>
</article>
""",
            'openai-responses': """\
<article class="cited-answer" style="font-family:system-ui,sans-serif;line-height:1.5;max-width:48em">
<div class="cited-answer-text" style="white-space:pre-wrap">K2 is 8,611 m tall. <sup class="cite"><a class="cite-mark" href="https://en.wikipedia.org/wiki/K2" rel="noopener noreferrer nofollow" target="_blank" title="K2 - Wikipedia (en.wikipedia.org)">[1]</a></sup> It lies on the China–Pakistan border <sup class="cite"><a class="cite-mark" href="https://example.com/border (map)" rel="noopener noreferrer nofollow" target="_blank" title="Border [map] (example.com)">[2]</a></sup>.</div>
<section class="cited-answer-sources"><h2 style="font-size:1em">Sources</h2><ol style="padding-left:2em"><li value="1" id="cite-source-1"><a href="https://en.wikipedia.org/wiki/K2" rel="noopener noreferrer nofollow" target="_blank">K2 - Wikipedia</a> <span class="cite-note" style="color:#555">(en.wikipedia.org)</span></li><li value="2" id="cite-source-2"><a href="https://example.com/border (map)" rel="noopener noreferrer nofollow" target="_blank">Border [map]</a> <span class="cite-note" style="color:#555">(example.com)</span></li></ol></section>
</article>
""",
            'openai-chat': """\
<article class="cited-answer" style="font-family:system-ui,sans-serif;line-height:1.5;max-width:48em">
<div class="cited-answer-text" style="white-space:pre-wrap">K2 is 8,611 m tall. <sup class="cite"><a class="cite-mark" href="https://en.wikipedia.org/wiki/K2" rel="noopener noreferrer nofollow" target="_blank" title="K2 - Wikipedia (en.wikipedia.org)">[1]</a></sup> It lies on the China–Pakistan border <sup class="cite"><a class="cite-mark" href="https://example.com/border (map)" rel="noopener noreferrer nofollow" target="_blank" title="Border [map] (example.com)">[2]</a></sup>.</div>
<section class="cited-answer-sources"><h2 style="font-size:1em">Sources</h2><ol style="padding-left:2em"><li value="1" id="cite-source-1"><a href="https://en.wikipedia.org/wiki/K2" rel="noopener noreferrer nofollow" target="_blank">K2 - Wikipedia</a> <span class="cite-note" style="color:#555">(en.wikipedia.org)</span></li><li value="2" id="cite-source-2"><a href="https://example.com/border (map)" rel="noopener noreferrer nofollow" target="_blank">Border [map]</a> <span class="cite-note" style="color:#555">(example.com)</span></li></ol></section>
</article>
""",
            'openrouter': """\
<article class="cited-answer" style="font-family:system-ui,sans-serif;line-height:1.5;max-width:48em">
<div class="cited-answer-text" style="white-space:pre-wrap">K2 is 8,611 m tall. It lies on the China–Pakistan border.</div>
<section class="cited-answer-sources-used"><h2 style="font-size:1em">Sources used</h2><ol style="padding-left:2em"><li value="1" id="cite-source-1"><a href="https://en.wikipedia.org/wiki/K2" rel="noopener noreferrer nofollow" target="_blank">K2 - Wikipedia</a> <span class="cite-note" style="color:#555">(en.wikipedia.org)</span><blockquote class="cite-excerpt" style="margin:0.25em 0 0.5em 1em;color:#444">K2 is 8,611 m tall.</blockquote></li><li value="2" id="cite-source-2"><a href="https://example.com/border (map)" rel="noopener noreferrer nofollow" target="_blank">Border [map]</a> <span class="cite-note" style="color:#555">(example.com)</span><blockquote class="cite-excerpt" style="margin:0.25em 0 0.5em 1em;color:#444">China–Pakistan border</blockquote></li></ol></section>
</article>
""",
            'google': """\
<article class="cited-answer" style="font-family:system-ui,sans-serif;line-height:1.5;max-width:48em">
<div class="cited-answer-text" style="white-space:pre-wrap">K2 is 8,611 m tall.<sup class="cite"><a class="cite-mark" href="https://en.wikipedia.org/wiki/K2" rel="noopener noreferrer nofollow" target="_blank" title="K2 - Wikipedia (en.wikipedia.org)">[1]</a></sup> It lies on the China–Pakistan border<sup class="cite"><a class="cite-mark" href="https://example.com/border (map)" rel="noopener noreferrer nofollow" target="_blank" title="Border [map] (example.com)">[2]</a></sup>.</div>
<section class="cited-answer-sources"><h2 style="font-size:1em">Sources</h2><ol style="padding-left:2em"><li value="1" id="cite-source-1"><a href="https://en.wikipedia.org/wiki/K2" rel="noopener noreferrer nofollow" target="_blank">K2 - Wikipedia</a> <span class="cite-note" style="color:#555">(en.wikipedia.org)</span></li><li value="2" id="cite-source-2"><a href="https://example.com/border (map)" rel="noopener noreferrer nofollow" target="_blank">Border [map]</a> <span class="cite-note" style="color:#555">(example.com)</span></li></ol></section>
</article>
""",
            'xai': """\
<article class="cited-answer" style="font-family:system-ui,sans-serif;line-height:1.5;max-width:48em">
<div class="cited-answer-text" style="white-space:pre-wrap">K2 is 8,611 m tall. <sup class="cite"><a class="cite-mark" href="https://en.wikipedia.org/wiki/K2" rel="noopener noreferrer nofollow" target="_blank" title="en.wikipedia.org">[1]</a></sup> It lies on the China–Pakistan border <sup class="cite"><a class="cite-mark" href="https://example.com/border (map)" rel="noopener noreferrer nofollow" target="_blank" title="example.com">[2]</a></sup>.</div>
<section class="cited-answer-sources"><h2 style="font-size:1em">Sources</h2><ol style="padding-left:2em"><li value="1" id="cite-source-1"><a href="https://en.wikipedia.org/wiki/K2" rel="noopener noreferrer nofollow" target="_blank">en.wikipedia.org</a></li><li value="2" id="cite-source-2"><a href="https://example.com/border (map)" rel="noopener noreferrer nofollow" target="_blank">example.com</a></li></ol></section>
</article>
""",
        }
    )


def test_documents_anthropic():
    citations = [ScriptedCitation('K2 is 8,611 m tall.', [REPORT])]
    answer = CitedAnswer.from_result(asyncio.run(Agent(CitingModel(TEXT, citations, style='anthropic')).run('q')))
    assert render_markdown(answer) == snapshot("""\
K2 is 8,611 m tall.\\[1\\] It lies on the China–Pakistan border.

**Sources**

- \\[1\\] *Survey report* (file\\_1) — “K2 was measured at 8,611 m.”
""")
    assert render_markdown(answer, 'footnotes', redact=True) == snapshot("""\
K2 is 8,611 m tall.[^1] It lies on the China–Pakistan border.

[^1]: *Survey report* (file\\_1) — “\\[redacted: 27 chars\\]”
""")
    assert render_html(answer, redact=True) == snapshot("""\
<article class="cited-answer" style="font-family:system-ui,sans-serif;line-height:1.5;max-width:48em">
<div class="cited-answer-text" style="white-space:pre-wrap">K2 is 8,611 m tall.<sup class="cite"><a class="cite-mark" href="#cite-source-1" title="Survey report (file_1)">[1]</a></sup> It lies on the China–Pakistan border.</div>
<section class="cited-answer-sources"><h2 style="font-size:1em">Sources</h2><ol style="padding-left:2em"><li value="1" id="cite-source-1"><span class="cite-title">Survey report</span> <span class="cite-note" style="color:#555">(file_1)</span><blockquote class="cite-excerpt" style="margin:0.25em 0 0.5em 1em;color:#444">[redacted: 27 chars]</blockquote></li></ol></section>
</article>
""")


def test_overlapping_and_nested_spans():
    text = 'Alpha beta gamma delta.'
    answer = _answer(
        text,
        content(0, 10, web(1)),  # 'Alpha beta'
        content(6, 16, web(2)),  # 'beta gamma': partial overlap
        content(6, 10, web(3)),  # 'beta': nested, same end as the first
        content(0, 23, web(4)),  # everything
    )
    assert render_markdown(answer, 'footnotes').splitlines()[0] == snapshot('Alpha beta[^1][^3] gamma[^2] delta.[^4]')
    assert render_markdown(answer).splitlines()[0] == snapshot(
        'Alpha beta[[1]](https://s1.example/page)[[3]](https://s3.example/page) gamma[[2]](https://s2.example/page) delta.[[4]](https://s4.example/page)'
    )
    assert render_html(answer).splitlines()[1] == snapshot(
        '<div class="cited-answer-text" style="white-space:pre-wrap">Alpha beta<sup class="cite"><a class="cite-mark" href="https://s1.example/page" rel="noopener noreferrer nofollow" target="_blank" title="Source 1 (s1.example)">[1]</a><a class="cite-mark" href="https://s3.example/page" rel="noopener noreferrer nofollow" target="_blank" title="Source 3 (s3.example)">[3]</a></sup> gamma<sup class="cite"><a class="cite-mark" href="https://s2.example/page" rel="noopener noreferrer nofollow" target="_blank" title="Source 2 (s2.example)">[2]</a></sup> delta.<sup class="cite"><a class="cite-mark" href="https://s4.example/page" rel="noopener noreferrer nofollow" target="_blank" title="Source 4 (s4.example)">[4]</a></sup></div>'
    )


def test_markers_are_replaced_and_overlapping_markers_merged():
    text = 'Claim one [1]. Claim two[2][3].'
    answer = _answer(
        text,
        marker(10, 13, web(1)),
        marker(24, 27, web(2)),
        marker(24, 30, web(3)),  # '[2][3]' overlaps the previous marker: one mark for both
        content(15, 24, web(4)),  # 'Claim two' ends right where the marker starts: joins its mark
    )
    assert render_markdown(answer, 'footnotes').splitlines()[0] == snapshot('Claim one [^1]. Claim two[^2][^3][^4].')
    assert render_markdown(answer).splitlines()[0] == snapshot(
        'Claim one [[1]](https://s1.example/page). Claim two[[2]](https://s2.example/page)[[3]](https://s3.example/page)[[4]](https://s4.example/page).'
    )


def test_marker_link_written_by_model_is_replaced():
    text = 'K2 is tall ([wikipedia.org](https://en.wikipedia.org/wiki/K2)).'
    answer = _answer(text, marker(11, 62, WIKI))
    assert render_markdown(answer) == snapshot('K2 is tall [[1]](https://en.wikipedia.org/wiki/K2).\n')
    assert render_markdown(answer, 'footnotes') == snapshot("""\
K2 is tall [^1].

[^1]: [K2 - Wikipedia](https://en.wikipedia.org/wiki/K2) (en.wikipedia.org)
""")


def test_unanchored_sources_listed_never_pinned_and_raw_only_hidden():
    part = TextPart(
        'An answer without positions.',
        citations=[Citation([web(1)]), Citation([web(2), REPORT])],
        provider_name='openrouter',
        provider_details={'citations': [{'type': 'file', 'file': {'content': 'RAW-SECRET-CONTENT'}}]},
    )
    answer = CitedAnswer.from_messages([ModelResponse(parts=[part])])
    assert answer.raw_only
    md = render_markdown(answer)
    html = render_html(answer)
    assert 'RAW-SECRET' not in md
    assert 'RAW-SECRET' not in html
    assert md == snapshot("""\
An answer without positions.

**Sources used**

- \\[1\\] [Source 1](https://s1.example/page) (s1.example)
- \\[2\\] [Source 2](https://s2.example/page) (s2.example)
- \\[3\\] *Survey report* (file\\_1) — “K2 was measured at 8,611 m.”
""")
    assert '<sup' not in html
    assert html == snapshot("""\
<article class="cited-answer" style="font-family:system-ui,sans-serif;line-height:1.5;max-width:48em">
<div class="cited-answer-text" style="white-space:pre-wrap">An answer without positions.</div>
<section class="cited-answer-sources-used"><h2 style="font-size:1em">Sources used</h2><ol style="padding-left:2em"><li value="1" id="cite-source-1"><a href="https://s1.example/page" rel="noopener noreferrer nofollow" target="_blank">Source 1</a> <span class="cite-note" style="color:#555">(s1.example)</span></li><li value="2" id="cite-source-2"><a href="https://s2.example/page" rel="noopener noreferrer nofollow" target="_blank">Source 2</a> <span class="cite-note" style="color:#555">(s2.example)</span></li><li value="3" id="cite-source-3"><span class="cite-title">Survey report</span> <span class="cite-note" style="color:#555">(file_1)</span><blockquote class="cite-excerpt" style="margin:0.25em 0 0.5em 1em;color:#444">K2 was measured at 8,611 m.</blockquote></li></ol></section>
</article>
""")


def test_grounding_redirect_shown_by_title():
    redirect = 'https://vertexaisearch.cloud.google.com/grounding-api-redirect/AUZIYQE1x2y3z'
    answer = _answer('K2 is tall.', content(0, 11, WebCitationSource(redirect, title='wikipedia.org')))
    md = render_markdown(answer, 'footnotes')
    assert md == snapshot("""\
K2 is tall.[^1]

[^1]: [wikipedia.org](https://vertexaisearch.cloud.google.com/grounding-api-redirect/AUZIYQE1x2y3z)
""")
    html = render_html(answer)
    assert html.count('grounding-api-redirect') == 2  # the mark's href and the list entry's href, never as text
    assert '>wikipedia.org</a>' in html
    untitled = _answer('K2 is tall.', content(0, 11, WebCitationSource(redirect)))
    assert '[Google Search result]' in render_markdown(untitled, 'footnotes')


def test_disallowed_url_is_text_and_reported():
    bad = WebCitationSource('javascript:alert(1)', title='Click me')
    answer = _answer('K2 is tall.', content(0, 11, bad))
    md = render_markdown(answer)
    assert md == snapshot("""\
K2 is tall.\\[1\\]

**Sources**

- \\[1\\] *Click me* (javascript:alert\\(1\\))
""")
    html = render_html(answer)
    assert 'href="javascript' not in html
    assert 'href="#cite-source-1"' in html
    assert [p.code for p in url_problems(answer)] == ['disallowed_url_scheme']
    assert url_problems(_answer('x', content(0, 1, web(1)))) == []


def test_allowed_schemes():
    answer = _answer('K2.', content(0, 3, WebCitationSource('http://plain.example/')))
    assert '](http://plain.example/)' in render_markdown(answer)
    assert '](http://plain.example/)' not in render_markdown(answer, allowed_schemes=('https',))
    mail = _answer('Mail.', content(0, 5, WebCitationSource('mailto:a@b.example', title='Write')))
    assert '](mailto:a@b.example)' in render_markdown(mail, allowed_schemes=('https', 'MAILTO'))
    for bad in (('javascript',), ('https', 'DATA'), ('ht tp',), 'https', (1,)):
        with pytest.raises(UserError):
            render_html(answer, allowed_schemes=bad)  # pyright: ignore[reportArgumentType]


def test_misuse():
    with pytest.raises(UserError, match="'plain'"):
        render_markdown(_answer('x'), 'plain')  # pyright: ignore[reportArgumentType]
    with pytest.raises(UserError, match='CitedAnswer'):
        render_html('not an answer')  # pyright: ignore[reportArgumentType]


def test_model_markdown_is_neutralised_but_safe_links_kept():
    text = 'See [docs](https://ok.example/docs) and [bad](javascript:alert(1)) <b onclick=x>b</b> ![i](https://t.example/p.png) Wow!'
    answer = _answer(text, content(len(text) - 4, len(text), web(1)))
    assert render_markdown(answer) == snapshot(
        'See [docs](https://ok.example/docs) and \\[bad\\](javascript:alert(1)) \\<b onclick=x\\>b\\</b\\> !\\[i\\](https://t.example/p.png) Wow\\![[1]](https://s1.example/page)\n'
    )


def test_incomplete_answer_says_so():
    answer = _answer('K2 is', content(0, 5, web(1)), complete=False)
    assert 'incomplete' in render_markdown(answer)
    assert 'cited-answer-incomplete' in render_html(answer)
    assert 'incomplete' not in render_markdown(_answer('K2 is', content(0, 5, web(1))))


def test_html_document_has_csp():
    page = render_html(_answer('K2.', content(0, 3, web(1))), document=True)
    assert page.startswith('<!DOCTYPE html>')
    assert "default-src 'none'" in page


@pytest.mark.parametrize(
    ('url', 'expected'),
    [
        pytest.param('https://example.com/a?b=c&d', 'https://example.com/a?b=c&d', id='https'),
        pytest.param('  HTTPS://Example.com/ ', 'HTTPS://Example.com/', id='spaces-case'),
        pytest.param('\thttps://exa\nmple.com/', 'https://example.com/', id='tab-newline-removed'),
        pytest.param('http://', None, id='no-host'),
        pytest.param('https://[broken', None, id='unparseable'),
        pytest.param('javascript:alert(1)', None, id='javascript'),
        pytest.param(' JaVaScRiPt:alert(1)', None, id='javascript-case'),
        pytest.param('java\tscript:alert(1)', None, id='javascript-tab'),
        pytest.param('\x00javascript:alert(1)', None, id='javascript-nul'),
        pytest.param('https://ok.exa\x00mple/', None, id='nul-inside'),
        pytest.param('data:text/html,x', None, id='data'),
        pytest.param('//evil.example/x', None, id='scheme-relative'),
        pytest.param('&#106;avascript:alert(1)', None, id='entity'),
        pytest.param('%6A%61vascript:alert(1)', None, id='percent'),
        pytest.param('ｈｔｔｐｓ://example.com', None, id='fullwidth'),
        pytest.param(None, None, id='not-a-string'),
    ],
)
def test_safe_url(url: object, expected: str | None):
    assert safe_url(url) == expected


def test_example_render_answer_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    example = Path(__file__).resolve().parents[1] / 'examples' / 'render_answer.py'
    page = tmp_path / 'answer.html'
    monkeypatch.setattr(sys, 'argv', [str(example), str(page)])
    runpy.run_path(str(example), run_name='__main__')
    out = capsys.readouterr().out
    assert '[^3]: *Expedition notes.pdf* (file\\_011) — “\\[redacted: 14 chars\\]”' in out
    html = page.read_text(encoding='utf-8')
    assert '<img' not in html
    assert '&lt;img src=x onerror=alert(1)&gt;' in html  # the hostile title, shown as text


def test_hand_built_answer_with_bad_spans_does_not_break():
    """Answers loaded from JSON may hold anything: spans outside the text or naming unknown sources are skipped."""
    good = _answer('Alpha beta.', content(0, 5, web(1)))
    bad = CitedAnswer(
        good.text,
        spans=[
            *good.spans,
            CitedSpan(3, 99, 'content', [1], message_index=0, part_index=0, citation_index=1),
            CitedSpan(6, 99, 'marker', [1], message_index=0, part_index=0, citation_index=2),
            CitedSpan(6, 10, 'marker', [7], message_index=0, part_index=0, citation_index=3),
        ],
        sources=good.sources,
    )
    assert render_markdown(bad, 'footnotes') == snapshot("""\
Alpha[^1] beta.

[^1]: [Source 1](https://s1.example/page) (s1.example)
""")
    assert '[7]' not in render_html(bad)


# --- code the model wrote -------------------------------------------------------------------------------------------


def _md_to_html(markdown: str) -> str:
    from markdown_it import MarkdownIt
    from mdit_py_plugins.footnote import footnote_plugin

    return MarkdownIt('commonmark').use(footnote_plugin).render(markdown)


def _cited(text: str, *spans: tuple[int, int, str], **response: Any) -> CitedAnswer:
    citations = [
        Citation([WebCitationSource(url, title=f'Title {n}')], anchor=ContentCitationAnchor(start=a, end=b))
        for n, (a, b, url) in enumerate(spans)
    ]
    citations.append(Citation([WebCitationSource('https://used.example/', title='Used')]))
    return CitedAnswer.from_messages([ModelResponse(parts=[TextPart(text, citations=citations)], **response)])


@pytest.mark.parametrize('style', ['inline', 'footnotes'])
def test_a_cut_off_code_block_is_closed_before_the_notice_and_the_sources(style: str):
    text = 'Install it as the docs say:\n```bash\npip install k2'
    answer = _cited(text, (0, 27, 'https://docs.example/install'), state='interrupted')
    markdown = render_markdown(answer, style)  # pyright: ignore[reportArgumentType]
    html = _md_to_html(markdown)
    after_code = html.split('</code></pre>', 1)[1]
    assert 'This answer is incomplete' in after_code
    assert '<a href="https://used.example/">Used</a>' in after_code
    if style == 'footnotes':
        assert 'https://docs.example/install' in after_code  # the footnote list
    assert html.count('<pre>') == 1


@pytest.mark.parametrize('style', ['inline', 'footnotes'])
def test_a_mark_is_never_put_inside_code(style: str):
    text = 'Run `pip install k2` first.\n```\nmake\n```\nDone.'
    inside_span = text.index(' k2')
    inside_block = text.index('make') + 2
    answer = _cited(text, (0, inside_span, 'https://a.example/'), (0, inside_block, 'https://b.example/'))
    html = _md_to_html(render_markdown(answer, style))  # pyright: ignore[reportArgumentType]
    for code in re.findall(r'<code>(.*?)</code>', html, flags=re.DOTALL):
        assert '[1]' not in code and '[2]' not in code and '[^' not in code, code
    assert html.count('https://a.example/') >= 1 and html.count('https://b.example/') >= 1
    assert '<code>pip install k2</code><' in html  # the mark follows the code span


def test_a_source_whose_only_span_fits_nowhere_is_listed_as_used():
    """A hand-built (or tampered) answer's span outside its text: its source is listed, not dropped without a word."""
    good = _answer('Alpha beta.', content(0, 5, web(1)), content(6, 10, web(2)))
    bad = dataclasses.replace(good, spans=[good.spans[0], dataclasses.replace(good.spans[1], start=6, end=99)])
    for rendered in (render_markdown(bad, 'footnotes'), render_markdown(bad), render_html(bad)):
        assert 'https://s2.example/page' in rendered
        assert 'Sources used' in rendered

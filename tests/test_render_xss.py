"""Hostile input through the renderers: the HTML has nothing executable, the Markdown no disallowed link."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import (
    Citation,
    ContentCitationAnchor,
    DocumentCitationSource,
    MarkerCitationAnchor,
    ModelResponse,
    TextPart,
    WebCitationSource,
)
from selectolax.lexbor import LexborHTMLParser as HTMLParser

from pydantic_ai_citations import CitedAnswer, render_html, render_markdown
from pydantic_ai_citations._render import _MD_LINK_RE, safe_url

PAYLOAD_FILE = Path(__file__).with_name('xss_payloads.txt')
ALLOWED = ('http', 'https')
# Everything the renderer may produce; anything else (script, iframe, svg, img, style, link, ...) fails.
HTML_TAGS = {
    'html', 'head', 'body', 'meta', 'title',
    'article', 'div', 'sup', 'a', 'p', 'section', 'h2', 'ol', 'li', 'span', 'blockquote',
}  # fmt: skip
HTML_ATTRS = {'class', 'style', 'href', 'rel', 'target', 'title', 'value', 'id', 'role', 'lang'}
META_ATTRS = {'charset', 'http-equiv', 'content', 'name'}
_ESCAPES = re.compile(r'\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|[tnr0\\])')


def _decode(line: str) -> str:
    def one(m: re.Match[str]) -> str:
        code = m.group(1)
        if code[0] in 'xu':
            return chr(int(code[1:], 16))
        return {'t': '\t', 'n': '\n', 'r': '\r', '0': '\0', '\\': '\\'}[code]

    return _ESCAPES.sub(one, line)


def load_payloads() -> list[str]:
    lines = PAYLOAD_FILE.read_text(encoding='utf-8').splitlines()
    return [_decode(line) for line in lines if line and not line.startswith('#')]


PAYLOADS = load_payloads()


def browser_scheme(href: str) -> str:
    """The scheme a browser would see for this (already entity-decoded) href."""
    cleaned = re.sub('[\t\n\r]', '', href).strip(''.join(chr(c) for c in range(0x21)))
    match = re.match(r'([A-Za-z][A-Za-z0-9+.\-]*):', cleaned)
    return match.group(1).lower() if match else ''


def assert_safe_html(html: str, allowed: tuple[str, ...] = ALLOWED) -> HTMLParser:
    tree = HTMLParser(html)
    for node in tree.css('*'):
        assert node.tag in HTML_TAGS, f'unexpected element <{node.tag}> in {html!r}'
        for name, value in node.attributes.items():
            allowed_attrs = META_ATTRS if node.tag == 'meta' else HTML_ATTRS
            assert name in allowed_attrs, f'unexpected attribute {name!r} on <{node.tag}>'
            assert not name.lower().startswith('on')
            if name == 'style':
                assert value is not None
                assert not re.search(r'url\(|@import|expression|javascript', value, re.I)
        if node.tag == 'a':
            href = node.attributes.get('href')
            assert href is not None
            if href.startswith('#cite-source-'):
                continue
            assert browser_scheme(href) in allowed, f'link with disallowed scheme: {href!r}'
            assert node.attributes.get('rel') == 'noopener noreferrer nofollow'
            assert urlsplit(href).hostname
        if node.tag == 'meta':
            assert node.attributes.get('http-equiv') in (None, 'Content-Security-Policy')
            assert 'url' not in (node.attributes.get('content') or '').lower()
    return tree


def _every_link(url: str) -> bool:
    return True


def _parsers() -> list[Any]:
    markdown_it = pytest.importorskip('markdown_it')
    footnote = pytest.importorskip('mdit_py_plugins.footnote')
    plain = markdown_it.MarkdownIt('commonmark')
    # GitHub-style: footnotes, tables and strikethrough on top of CommonMark (linkify needs another package).
    gfm = markdown_it.MarkdownIt('commonmark').use(footnote.footnote_plugin).enable(['table', 'strikethrough'])
    for parser in (plain, gfm):
        parser.validateLink = _every_link  # see every link, including the ones markdown-it would drop
    return [plain, gfm]


PARSERS = _parsers()


def expected_links(answer: CitedAnswer, allowed: tuple[str, ...] = ALLOWED) -> set[str]:
    """Where the package may put links: its sources' checked URLs, and the model's own inline links it keeps."""
    urls = {safe_url(s.url, allowed) for s in answer.sources if s.url}
    urls |= {safe_url(m.group(2), allowed) for m in _MD_LINK_RE.finditer(answer.text)}
    return {unquote(u) for u in urls if u}


def assert_safe_markdown(md: str, allowed: tuple[str, ...] = ALLOWED, *, links: set[str] | None = None) -> None:
    """No HTML, no image, only allowed schemes; with `links`, every link points to one of them (or a footnote)."""
    for parser in PARSERS:
        for token in parser.parse(md):
            assert token.type not in ('html_block', 'html_inline'), f'raw HTML in Markdown: {token.content!r}'
            children: list[Any] = token.children or []
            for child in children:
                assert child.type not in ('html_inline', 'image'), f'{child.type} in Markdown: {child.content!r}'
                if child.type != 'link_open':
                    continue
                href = str(child.attrs.get('href', ''))
                scheme = browser_scheme(href)
                assert scheme in (*allowed, ''), f'Markdown link with disallowed scheme: {href!r}'
                if scheme == '':
                    # Only our own footnote marks read as relative links, in renderers without footnotes.
                    assert not re.match(r'\s*[A-Za-z][A-Za-z0-9+.\-]*:', href), href
                elif links is not None:
                    assert unquote(href) in links, f'link to {href!r}, which the package did not put there: {md!r}'
        # And the HTML a CommonMark renderer makes of it is safe too (its own link validation switched off).
        rendered = parser.render(md)
        tree = HTMLParser(rendered)
        assert not tree.css('script, iframe, object, embed, svg, img, style, link, math')
        for node in tree.css('a'):
            assert browser_scheme(node.attributes.get('href') or '') in (*allowed, '')


def hostile_answer(text: str, title: str, url: str, excerpt: str, doc_id: str) -> CitedAnswer:
    n = len(text)
    citations = [
        Citation(
            [WebCitationSource(url, title=title, excerpts=[excerpt])], anchor=ContentCitationAnchor(start=0, end=n)
        ),
        Citation([DocumentCitationSource(document_id=doc_id, title=title, excerpts=[excerpt])]),
        Citation([WebCitationSource('https://ok.example/' + url, title=title)]),
    ]
    if n >= 2:
        citations.append(Citation([WebCitationSource(url)], anchor=MarkerCitationAnchor(start=n // 2, end=n)))
    part = TextPart(text, citations=citations, provider_name='hostile')
    return CitedAnswer.from_messages([ModelResponse(parts=[part])])


@pytest.mark.parametrize('payload', PAYLOADS)
def test_payload_everywhere(payload: str):
    answer = hostile_answer(payload, payload, payload, payload, payload)
    for html in (render_html(answer), render_html(answer, document=True), render_html(answer, redact=True)):
        tree = assert_safe_html(html)
        text_node = tree.css_first('.cited-answer-text')
        assert text_node is not None
    for style in ('inline', 'footnotes'):
        assert_safe_markdown(render_markdown(answer, style), links=expected_links(answer))


@pytest.mark.parametrize('payload', PAYLOADS)
def test_payload_right_after_a_mark(payload: str):
    # The mark sits after the first word; the payload follows it directly (`word[^1](https://evil…)`).
    text = 'word' + payload
    part = TextPart(
        text,
        citations=[Citation([WebCitationSource('https://ok.example/a')], anchor=ContentCitationAnchor(start=0, end=4))],
    )
    answer = CitedAnswer.from_messages([ModelResponse(parts=[part])])
    for style in ('inline', 'footnotes'):
        assert_safe_markdown(render_markdown(answer, style), links=expected_links(answer))


@pytest.mark.parametrize(
    'tail',
    [
        '(https://evil.example/phish)',
        '(javascript:alert(1))',
        ': https://evil.example/',
        '[x](https://evil.example/)',
        '[x]: https://evil.example/',
        '(<https://evil.example/>)',
        ' (https://evil.example/)',
    ],
)
@pytest.mark.parametrize('style', ['inline', 'footnotes'])
def test_marks_cannot_be_continued_into_links(tail: str, style: str):
    text = 'claim' + tail
    part = TextPart(
        text,
        citations=[Citation([WebCitationSource('https://ok.example/a')], anchor=ContentCitationAnchor(start=0, end=5))],
    )
    answer = CitedAnswer.from_messages([ModelResponse(parts=[part])])
    md = render_markdown(answer, style)  # pyright: ignore[reportArgumentType]
    links = {'https://ok.example/a'}
    if tail.startswith('[x](https'):  # the model's own inline link, with an allowed scheme, is kept by design
        links.add('https://evil.example/')
    assert_safe_markdown(md, links=links)


@pytest.mark.parametrize(
    'url',
    [
        'https://ok.example/a`b` [x](javascript:alert(1))',
        'https://ok.example/`code`/(x)',
        'https://ok.example/a b<c>d"e\'f',
        'https://ok.example/\x00\x1f\x7f',
        'https://ok.example/a)(b',
    ],
)
@pytest.mark.parametrize('style', ['inline', 'footnotes'])
def test_hostile_source_urls_stay_one_link(url: str, style: str):
    part = TextPart(
        'claim text', citations=[Citation([WebCitationSource(url)], anchor=ContentCitationAnchor(start=0, end=5))]
    )
    answer = CitedAnswer.from_messages([ModelResponse(parts=[part])])
    md = render_markdown(answer, style)  # pyright: ignore[reportArgumentType]
    assert '`' not in md.split('claim', 1)[1]
    assert_safe_markdown(md, links=expected_links(answer))


@pytest.mark.parametrize('payload', PAYLOADS)
def test_payload_as_url_of_plain_answer(payload: str):
    answer = hostile_answer('Safe text.', 'Title', payload, 'excerpt', 'doc')
    tree = assert_safe_html(render_html(answer))
    # The answer text survives escaping unchanged.
    text_node = tree.css_first('.cited-answer-text')
    assert text_node is not None
    assert text_node.text().startswith('Safe ')
    assert_safe_markdown(render_markdown(answer), links=expected_links(answer))
    assert_safe_markdown(render_markdown(answer, 'footnotes'), links=expected_links(answer))


def test_text_round_trips_through_html_escaping():
    text = '<b>&amp; "quotes" \'single\'</b> 1 < 2 > 0'
    answer = hostile_answer(text, 't', 'https://x.example', 'e', 'd')
    node = HTMLParser(render_html(answer)).css_first('.cited-answer-text')
    assert node is not None
    assert node.text().startswith(text[: len(text) // 2])


fragments = st.sampled_from(PAYLOADS) | st.text(max_size=40)
hostile_text = st.lists(fragments, min_size=1, max_size=4).map(''.join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=hostile_text, title=hostile_text, url=hostile_text, excerpt=hostile_text, doc_id=hostile_text)
def test_hypothesis_hostile_strings(text: str, title: str, url: str, excerpt: str, doc_id: str):
    answer = hostile_answer(text or 'x', title, url, excerpt, doc_id or 'd')
    assert_safe_html(render_html(answer))
    assert_safe_markdown(render_markdown(answer), links=expected_links(answer))
    assert_safe_markdown(render_markdown(answer, 'footnotes'), links=expected_links(answer))


@settings(max_examples=100, deadline=None)
@given(data=st.data(), text=st.text(min_size=1, max_size=60))
def test_hypothesis_random_spans_never_break_output(data: st.DataObject, text: str):
    n = len(text)
    citations: list[Citation] = []
    for i in range(data.draw(st.integers(0, 6))):
        start = data.draw(st.integers(0, n - 1))
        end = data.draw(st.integers(start + 1, n))
        anchor_type = data.draw(st.sampled_from([ContentCitationAnchor, MarkerCitationAnchor]))
        citations.append(
            Citation([WebCitationSource(f'https://s{i}.example/')], anchor=anchor_type(start=start, end=end))
        )
    answer = CitedAnswer.from_messages([ModelResponse(parts=[TextPart(text, citations=citations or None)])])
    for style in ('inline', 'footnotes'):
        md = render_markdown(answer, style)
        assert_safe_markdown(md, links=expected_links(answer))
        # Every anchored source gets a mark.
        for span in answer.spans:
            for number in span.sources:
                assert (f'[^{number}]' if style == 'footnotes' else f'[[{number}]]') in md
    tree = assert_safe_html(render_html(answer))
    marks = {a.text() for a in tree.css('a.cite-mark')}
    assert marks == {f'[{n}]' for span in answer.spans for n in span.sources}


@pytest.mark.parametrize(
    'bad_html',
    [
        '<script>alert(1)</script>',
        '<div onclick="x">a</div>',
        '<a href="javascript:alert(1)">a</a>',
        '<a href=" JaVa&#x09;ScRiPt:alert(1)">a</a>',
        '<a href="https://ok.example">no rel</a>',
        '<svg onload=alert(1)>',
        '<div style="background:url(https://evil.example/x)">a</div>',
        '<img src=x>',
    ],
)
def test_html_checker_catches_bad_output(bad_html: str):
    with pytest.raises(AssertionError):
        assert_safe_html(bad_html)


@pytest.mark.parametrize(
    'bad_md',
    [
        '[x](javascript:alert(1))',
        '[x](&#106;avascript:alert(1))',
        '[x](<JAVASCRIPT:alert(1)>)',
        '<javascript:alert(1)>',
        '[x]\n\n[x]: vbscript:msgbox(1)',
        '![i](https://evil.example/p.png)',
        '<b onclick=x>b</b>',
    ],
)
def test_markdown_checker_catches_bad_output(bad_md: str):
    with pytest.raises(AssertionError):
        assert_safe_markdown(bad_md)

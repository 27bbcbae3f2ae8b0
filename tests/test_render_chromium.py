"""Open rendered answers in headless Chromium: no console errors, nothing executes, every citation link is clickable."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from _chromium import console_errors, dump_dom, find_chromium, screenshot
from pydantic_ai import (
    Agent,
    Citation,
    ContentCitationAnchor,
    DocumentCitationSource,
    ModelResponse,
    TextPart,
    WebCitationSource,
)
from selectolax.lexbor import LexborHTMLParser

from pydantic_ai_citations import CitedAnswer, render_html
from pydantic_ai_citations.testing import CitingModel, ScriptedCitation

pytestmark = pytest.mark.skipif(
    find_chromium() is None,
    reason='headless Chromium not found (install Debian `chromium` at /usr/bin/chromium or set $CHROMIUM)',
)

DOCS_PNG = Path(__file__).resolve().parents[1] / 'docs' / 'answer.png'
# The hostile corpus, first lines only (ASCII escapes `\t`, `\n`, `\0`, `\xNN` decoded as in test_render_xss.py).
PAYLOADS = [
    re.sub(
        r'\\(x[0-9a-fA-F]{2}|[tnr0])',
        lambda m: {'t': '\t', 'n': '\n', 'r': '\r', '0': '\0'}.get(m[1]) or chr(int(m[1][1:], 16)),
        line,
    )
    for line in (Path(__file__).with_name('xss_payloads.txt').read_text(encoding='utf-8').splitlines())
    if line and not line.startswith('#')
][:40]

# Records anything that tries to run or load, before the answer is parsed.
_BEFORE = """<script>
window.__alerts = []; window.__errors = [];
window.alert = window.confirm = window.prompt = function (m) { window.__alerts.push(String(m)); };
window.addEventListener('error', function (e) {
  window.__errors.push(String(e.message || ('load error: ' + (e.target && (e.target.src || e.target.href)))));
}, true);
</script>"""
# After load: every link's box, whether a click at its centre lands on it, and what was recorded.
_AFTER = """<script>
window.addEventListener('load', function () {
  var links = Array.prototype.map.call(document.querySelectorAll('.cited-answer a[href]'), function (a) {
    a.scrollIntoView({block: 'center'});
    var r = a.getBoundingClientRect();
    var hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    var note = a.parentElement.querySelector('.cite-note');
  return {href: a.getAttribute('href'), protocol: a.protocol, width: r.width, height: r.height,
            hit: !!hit && (hit === a || a.contains(hit)), mark: a.classList.contains('cite-mark'),
            hostname: a.hostname, note: note ? note.textContent : null};
  });
  var pre = document.createElement('pre');
  pre.id = 'report';
  pre.textContent = JSON.stringify({alerts: window.__alerts, errors: window.__errors, links: links});
  document.body.appendChild(pre);
});
</script>"""


def readme_answer() -> CitedAnswer:
    text = (
        'K2 is 8,611 m tall, the second-highest mountain on Earth. '
        'It lies on the China–Pakistan border, in the Karakoram range. '
        'The first ascent was in 1954 by an Italian expedition.'
    )
    citations = [
        ScriptedCitation(
            'K2 is 8,611 m tall, the second-highest mountain on Earth.',
            [WebCitationSource('https://en.wikipedia.org/wiki/K2', title='K2 - Wikipedia')],
        ),
        ScriptedCitation(
            'It lies on the China–Pakistan border, in the Karakoram range.',
            [WebCitationSource('https://www.britannica.com/place/K2', title='K2 | Britannica')],
        ),
        ScriptedCitation(
            'The first ascent was in 1954 by an Italian expedition.',
            [DocumentCitationSource(document_id='file_011', title='Expedition notes.pdf')],
        ),
    ]
    agent = Agent(CitingModel(text, citations, style='anthropic'))
    return CitedAnswer.from_result(asyncio.run(agent.run('Tell me about K2')))


def hostile_answer() -> CitedAnswer:
    text = ' '.join(PAYLOADS[:30])
    citations = [
        Citation(
            [WebCitationSource(payload, title=payload, excerpts=[payload])],
            anchor=ContentCitationAnchor(start=i, end=i + 1),
        )
        for i, payload in enumerate(PAYLOADS)
    ]
    citations.append(Citation([DocumentCitationSource(document_id=PAYLOADS[0], title=PAYLOADS[1])]))
    return CitedAnswer.from_messages([ModelResponse(parts=[TextPart(text, citations=citations)])])


def harness(tmp_path: Path, answer: CitedAnswer, name: str) -> Path:
    page = tmp_path / f'{name}.html'
    page.write_text(
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{name}</title>{_BEFORE}</head>'
        f'<body>{render_html(answer)}{_AFTER}</body></html>',
        encoding='utf-8',
    )
    return page


def report(page: Path) -> dict[str, list[dict[str, object]] | list[str]]:
    tree = LexborHTMLParser(dump_dom(page))
    node = tree.css_first('#report')
    assert node is not None, 'the report script did not run'
    return json.loads(node.text())


def test_citation_links_clickable_and_no_errors(tmp_path: Path):
    answer = readme_answer()
    result = report(harness(tmp_path, answer, 'readme'))
    assert result['alerts'] == []
    assert result['errors'] == []
    links = result['links']
    marks = [link for link in links if isinstance(link, dict) and link['mark']]
    assert len(marks) == 3
    for link in links:
        assert isinstance(link, dict)
        assert link['protocol'] in ('https:', 'http:', 'file:'), link
        assert link['width'], link
        assert link['height'], link
        assert link['hit'], f'link covered or not clickable: {link}'
        if link['protocol'] == 'file:':  # an in-page link to a source without URL
            assert str(link['href']).startswith('#cite-source-')
    assert {link['href'] for link in marks} == {
        'https://en.wikipedia.org/wiki/K2',
        'https://www.britannica.com/place/K2',
        '#cite-source-3',
    }


def test_standalone_page_has_no_console_messages(tmp_path: Path):
    page = tmp_path / 'answer.html'
    page.write_text(render_html(readme_answer(), document=True), encoding='utf-8')
    assert console_errors(page) == []


def test_console_errors_helper_sees_errors(tmp_path: Path):
    page = tmp_path / 'broken.html'
    page.write_text('<!DOCTYPE html><script>undefinedFunction()</script>', encoding='utf-8')
    assert any('undefinedFunction' in message for message in console_errors(page))


def test_hostile_answer_runs_nothing(tmp_path: Path):
    result = report(harness(tmp_path, hostile_answer(), 'hostile'))
    assert result['alerts'] == []
    assert result['errors'] == []
    for link in result['links']:
        assert isinstance(link, dict)
        assert link['protocol'] in ('https:', 'http:') or str(link['href']).startswith('#cite-source-'), link
    page = tmp_path / 'hostile-doc.html'
    page.write_text(render_html(hostile_answer(), document=True), encoding='utf-8')
    assert console_errors(page) == []


def test_screenshot(tmp_path: Path):
    page = tmp_path / 'answer.html'
    page.write_text(render_html(readme_answer(), document=True), encoding='utf-8')
    png = screenshot(page, tmp_path / 'answer.png', width=820, height=330)
    data = png.read_bytes()
    assert data[:8] == b'\x89PNG\r\n\x1a\n'
    assert len(data) > 5_000
    if os.environ.get('UPDATE_DOCS_SCREENSHOT'):  # `UPDATE_DOCS_SCREENSHOT=1 pytest ...` refreshes the README image
        DOCS_PNG.parent.mkdir(exist_ok=True)
        shutil.copyfile(png, DOCS_PNG)


SPOOFS = [
    'https://evil.example\\@en.wikipedia.org/wiki/K2',  # a browser reads `\` as `/`: the host is evil.example
    'https://evil.example\\.en.wikipedia.org/',
    'https://en.wikipedia.org%2Eevil.example/',  # a browser decodes the host's escape
    'https://user:pw@en.wikipedia.org/wiki/K2',
    'https://EN.Wikipedia.org./wiki/K2',
    'https://[2001:db8::1]:8443/x',
]


def test_the_domain_shown_is_the_host_linked_to(tmp_path: Path):
    citations = [
        Citation([WebCitationSource(url, title=f'Title {i} \u202e')], anchor=ContentCitationAnchor(start=i, end=i + 1))
        for i, url in enumerate(SPOOFS)
    ]
    answer = CitedAnswer.from_messages([ModelResponse(parts=[TextPart('abcdefgh', citations=citations)])])
    links = [link for link in report(harness(tmp_path, answer, 'spoofs'))['links'] if isinstance(link, dict)]
    listed = [link for link in links if not link['mark']]
    assert listed, 'no source links'
    for link in listed:
        note = str(link['note'] or '').strip('()')
        host = str(link['hostname']).strip('[]').removeprefix('www.').rstrip('.').lower()
        assert note == host, link  # what the reader is told is where the link goes
    assert '\u202e' not in render_html(answer)

"""One bad page is one bad verdict: hostile charset declarations never crash decoding or the support check."""

from __future__ import annotations

import codecs

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic_ai import Citation, ContentCitationAnchor, TextPart, WebCitationSource
from pydantic_ai.messages import ModelRequest, ModelResponse, UserPromptPart

from pydantic_ai_citations import CitedAnswer
from pydantic_ai_citations.support import PageSnapshot, check_support_sync, decode_body

ARTICLE = '<p>The harbour bridge opened to traffic in March after seven years of construction work.</p>'
CLAIM = 'The harbour bridge opened to traffic in March.'

# Transform codecs Python knows (bytes-to-bytes, str-to-str, or not page encodings) and names it does not.
NOT_TEXT = ['base64', 'base_64', 'hex', 'hex_codec', 'rot13', 'rot_13', 'zlib', 'zip', 'bz2', 'uu', 'quopri',
            'quotedprintable', 'punycode', 'idna', 'unicode_escape', 'raw_unicode_escape', 'utf-7', 'undefined',
            'mbcs', 'oem', 'string_escape', 'cp037', 'cp500']  # fmt: skip
UNKNOWN = ['no-such-charset', 'utf8mb4', '', ' ', 'x' * 300, 'utf-8\x00', '"', "'", '=', ';', 'ⓤⓣⓕ-8', '\udcff',
           '../../etc/passwd', 'x-user-defined']  # fmt: skip
WEB = ['utf-8', 'UTF8', 'latin1', 'iso-8859-1', 'windows-1252', 'cp1251', 'koi8-r', 'shift_jis', 'euc-jp', 'gbk',
       'gb18030', 'big5', 'euc-kr', 'utf-16', 'x-mac-cyrillic', 'iso-8859-8-i', 'ascii']  # fmt: skip


def _answer(urls: list[str]) -> CitedAnswer:
    citations = [
        Citation(
            sources=[WebCitationSource(url=u, title=f'page {i}')], anchor=ContentCitationAnchor(start=0, end=len(CLAIM))
        )
        for i, u in enumerate(urls)
    ]
    return CitedAnswer.from_messages(
        [ModelRequest(parts=[UserPromptPart('q')]), ModelResponse(parts=[TextPart(CLAIM, citations=citations)])]
    )


def _snapshot(url: str, body: bytes, content_type: str) -> PageSnapshot:
    snap = PageSnapshot.from_text(url, '', content_type=content_type)
    return PageSnapshot(
        url=url,
        final_url=url,
        status=200,
        liveness='ok',
        captured_at=snap.captured_at,
        body=body,
        content_type=content_type,
    )


@pytest.mark.parametrize('charset', [pytest.param(c, id=f'not-text-{c}') for c in NOT_TEXT])
@pytest.mark.parametrize('where', ['header', 'meta'])
def test_transform_charsets_are_unreadable_not_a_crash(charset: str, where: str) -> None:
    body = ARTICLE.encode()
    if where == 'meta':
        body = f'<meta charset="{charset}">'.encode() + body
    decoded = decode_body(body, f'text/html; charset={charset}' if where == 'header' else 'text/html')
    try:
        codecs.lookup(charset)
        known = True
    except LookupError:
        known = False
    if known:
        assert decoded.text is None
        assert decoded.reason == f'declared charset {charset!r} is not a text encoding'
    else:  # an unknown label: ignored as browsers do, and said
        assert decoded.text is not None
        assert decoded.reason is not None and 'unknown charset' in decoded.reason


@pytest.mark.parametrize('charset', [pytest.param(c, id=f'unknown-{i}') for i, c in enumerate(UNKNOWN)])
@pytest.mark.parametrize('where', ['header', 'meta'])
def test_unknown_labels_fall_back_like_browsers(charset: str, where: str) -> None:
    body = ARTICLE.encode()
    if where == 'meta':
        body = f'<meta charset="{charset}">'.encode('utf-8', 'surrogatepass') + body
    decoded = decode_body(body, f'text/html; charset={charset}' if where == 'header' else 'text/html')
    if where == 'meta' and '\x00' in charset:  # a NUL byte in the first 4 KB: a binary body
        assert decoded.text is None and decoded.reason == 'not a text page (binary body)'
        return
    assert decoded.text is not None
    assert 'harbour bridge' in decoded.text


@pytest.mark.parametrize('charset', WEB)
def test_web_encodings_still_decode(charset: str) -> None:
    python_name = {'x-mac-cyrillic': 'mac-cyrillic', 'iso-8859-8-i': 'iso8859-8'}.get(charset, charset)
    decoded = decode_body(ARTICLE.encode(python_name), f'text/html; charset={charset}')
    assert decoded.text is not None and 'harbour bridge' in decoded.text, decoded


def test_one_bad_page_is_one_bad_verdict_and_the_rest_is_checked() -> None:
    bad = [f'https://bad.test/{c}' for c in NOT_TEXT]
    good = 'https://good.test/article'
    answer = _answer([*bad, good])
    pages: dict[str, PageSnapshot | str | bytes] = {
        url: _snapshot(url, ARTICLE.encode(), f'text/html; charset={c}') for url, c in zip(bad, NOT_TEXT, strict=True)
    }
    pages[good] = _snapshot(good, ARTICLE.encode(), 'text/html; charset=utf-8')
    report = check_support_sync(answer, pages)
    verdicts = {c.url: c for c in report.checks}
    assert verdicts[good].verdict == 'supported'
    for url, charset in zip(bad, NOT_TEXT, strict=True):
        try:
            codecs.lookup(charset)
        except LookupError:
            assert verdicts[url].verdict == 'supported'  # unknown label ignored, page read as UTF-8
        else:
            assert verdicts[url].verdict == 'unreadable'
            assert verdicts[url].reason == f'declared charset {charset!r} is not a text encoding'


@given(st.binary(max_size=2000), st.text(max_size=40))
def test_decode_body_never_raises(body: bytes, charset: str) -> None:
    decoded = decode_body(body, f'text/html; charset={charset}')
    assert decoded.text is not None or decoded.reason


@pytest.mark.parametrize('charset', ['utf-16le', 'utf-16be', 'utf-16'])
def test_utf16_declared_in_the_header_without_a_bom_is_text(charset: str) -> None:
    """UTF-16 text holds NUL bytes: with the header naming it, it is decoded (it was called binary); `utf-16` alone
    is little-endian, as browsers read it."""
    python_name = {'utf-16': 'utf-16-le'}.get(charset, charset)
    decoded = decode_body(ARTICLE.encode(python_name), f'text/html; charset={charset}')
    assert decoded.text == ARTICLE
    assert decoded.encoding == codecs.lookup(python_name).name
    assert decode_body(ARTICLE.encode(python_name), 'text/html').text is None  # undeclared: binary, as before


@pytest.mark.parametrize('charset', ['shift_jis', 'gbk', 'euc-kr', 'big5', 'utf-8'])
def test_a_cut_that_splits_a_character_keeps_the_declared_charset(charset: str) -> None:
    """The size cap may end the body inside a multi-byte character: only that character goes (a guess replaced the
    declared charset, and the page came out as mojibake)."""
    text = {'shift_jis': '東京は日本の首都です。', 'gbk': '北京是中华人民共和国的首都。', 'euc-kr': '서울은 대한민국의 수도이다.',
            'big5': '臺北是中華民國的首都。', 'utf-8': 'Zürich liegt am Zürichsee.'}[charset] * 40  # fmt: skip
    body = f'<p>{text}</p>'.encode(charset)
    for cut in range(len(body) - 8, len(body)):
        decoded = decode_body(body, f'text/html; charset={charset}', max_bytes=cut)
        assert decoded.encoding == codecs.lookup(charset).name, (cut, decoded)
        assert decoded.text is not None and body.decode(charset).startswith(decoded.text)
        assert len(decoded.text) >= len(body[:cut].decode(charset, 'ignore')) - 1


def test_single_byte_labels_are_read_as_browsers_read_them() -> None:
    """ISO-8859-1, latin1 and ASCII labels are windows-1252 for browsers, and windows-1252 reads every byte (Python's
    cp1252 refused five, and a guessed codec turned `España` into `Espaņa`)."""
    body = '<p>The price is €5 – “quoted” text. En España.</p>'.encode('cp1252')
    for label in ('iso-8859-1', 'latin1', 'us-ascii', 'windows-1252'):
        decoded = decode_body(body, f'text/html; charset={label}')
        assert (decoded.encoding, decoded.text) == ('cp1252', body.decode('cp1252')), label
    odd = decode_body(b'<p>Espa\xf1a \x81 ma\xf1ana</p>', 'text/html; charset=windows-1252')
    assert (odd.encoding, odd.text) == ('cp1252', '<p>España \x81 mañana</p>')


def test_a_few_bad_bytes_under_a_declared_charset_are_replaced_and_said() -> None:
    body = ('<p>' + '東京は日本の首都です。' * 200 + '</p>').encode('shift_jis')
    damaged = body[:223] + b'\xff' + body[223:]  # (between two characters)
    decoded = decode_body(damaged, 'text/html; charset=shift_jis')
    assert decoded.encoding == 'shift_jis' and decoded.text is not None and '\ufffd' in decoded.text
    assert decoded.reason == '1 byte sequence(s) not valid in shift_jis replaced'
    wrong = decode_body('<p>Weather 🌧️ and 🌞 today. 雨が降る.</p>'.encode() * 30, 'text/html; charset=shift_jis')
    assert wrong.encoding == 'utf-8'  # a charset that fails throughout is taken as wrong, as before

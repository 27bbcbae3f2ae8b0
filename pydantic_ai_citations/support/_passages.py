"""Split a page (HTML, Markdown or plain text) into passages: the content blocks a claim can be checked against.

HTML is parsed with selectolax (lexbor), never with regular expressions, and walked once, iteratively (deeply
nested junk must not hit the recursion limit). The walk keeps one buffer of text and *ends the current passage*
at the edges of content blocks (`p`, `li`, headings, table cells, `blockquote`, ...). Layout containers (`div`,
`section`, `ul`, `table`, ...) are not boundaries and never become passages of their own: taking a container's
whole text as a passage would count the words of every block inside it a second time. Text written directly
inside a container (outside any block) still becomes exactly one passage: it is kept apart from the text
before and after the container *if the container holds text*, so a menu of bare links stays a short passage
below `min_words`, while an empty container in the middle of a sentence (an ad slot, a clearfix `div`) does not
split it. Two `<br>` in a row end a passage too, the HTML spelling of a blank line. Each visible word is
therefore in at most one passage, and in exactly one when its block reaches `min_words`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import TypeAdapter
from pydantic_ai.exceptions import UserError
from selectolax.lexbor import LexborHTMLParser, LexborNode

from .._checks import require, require_at_least

__all__ = ('DEFAULT_MIN_PASSAGE_WORDS', 'Passage', 'PageKind', 'passages_ta', 'split_passages', 'looks_like_html')

DEFAULT_MIN_PASSAGE_WORDS = 5
"""Passages shorter than this many words (menu items, breadcrumbs, button labels) are dropped when splitting."""

PageKind = Literal['auto', 'html', 'markdown', 'text']


@dataclass(frozen=True)
class Passage:
    """One content block of a page, whitespace folded."""

    text: str
    """The block's visible text, entities unescaped, whitespace folded to single spaces."""
    index: int
    """0-based index among the page's kept passages."""
    position: float
    """Where the passage starts in the page's visible text, from 0 (top) to 1 (bottom)."""
    word_count: int
    """Number of whitespace-separated words in `text`."""


passages_ta: TypeAdapter[list[Passage]] = TypeAdapter(list[Passage])
"""JSON round trip for lists of passages."""

# Ends of these elements end a passage: they are the content blocks.
_BLOCKS = frozenset(
    {
        'p', 'li', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'td', 'th', 'blockquote', 'dt', 'dd', 'pre', 'caption',
        'figcaption', 'summary', 'legend', 'address', 'button', 'option', 'label', 'textarea',
    }
)  # fmt: skip
# Layout containers: never a passage of their own, but their edges end a run of loose text.
_CONTAINERS = frozenset(
    {
        'html', 'body', 'div', 'section', 'article', 'main', 'header', 'footer', 'nav', 'aside', 'ul', 'ol', 'dl',
        'menu', 'table', 'thead', 'tbody', 'tfoot', 'tr', 'colgroup', 'form', 'fieldset', 'figure', 'center',
        'details', 'hgroup', 'dialog', 'hr', 'select', 'optgroup', 'frameset', 'frame', 'search',
    }
)  # fmt: skip
# Content that is never visible text.
_DROPPED = frozenset(
    {
        'script', 'style', 'noscript', 'svg', 'template', 'head', 'title', 'iframe', 'object', 'embed', 'canvas',
        'math', 'audio', 'video', 'datalist', 'map', '-comment', '-doctype',
    }
)  # fmt: skip
# Skipped with everything inside: invisible content, and void elements that hold no text.
_SKIPPED = _DROPPED | {'img', 'input', 'wbr'}
_HTML_HINTS = (_BLOCKS | _CONTAINERS | {'span', 'a', 'b', 'i', 'em', 'strong', 'img', 'script', 'style'}) - {
    'html',
    'body',
}


@dataclass(slots=True)
class _Builder:
    """Collects raw blocks (text, word count, start offset in the page's visible text) while walking."""

    parts: list[str]
    blocks: list[tuple[str, int, int]]
    length: int = 0

    def add(self, text: str) -> None:
        self.parts.append(text)

    def flush(self) -> None:
        if not self.parts:
            return
        words = ''.join(self.parts).split()
        self.parts.clear()
        if words:
            text = ' '.join(words)
            self.blocks.append((text, len(words), self.length))
            self.length += len(text) + 1


_INLINE, _BLOCK, _CONTAINER, _SKIP, _BR, _TEXT = range(1, 7)  # (never 0: see `_walk`)
# What the walk does with each tag name (`None`: a node that is neither an element, text nor comment).
_KINDS: dict[str | None, int] = {
    None: _SKIP,
    'br': _BR,
    '-text': _TEXT,
    **dict.fromkeys(_BLOCKS, _BLOCK),
    **dict.fromkeys(_CONTAINERS, _CONTAINER),
    **dict.fromkeys(_SKIPPED, _SKIP),
}


MAX_HTML_DEPTH = 1024
"""Elements nested deeper than this are read as their parent's text (their tags dropped), as browsers cap nesting
(Chromium at 512): the HTML parser's work per start tag grows with the depth, so a page of 40,000 nested `div`s took
seconds, and one at the size cap would take minutes. Real pages nest a few dozen levels."""

_TAG_RE = re.compile(
    r'<!--.*?(?:-->|\Z)'  # a comment
    r'|<(script|style|textarea|title|xmp|iframe|noembed|noframes|noscript|plaintext)\b.*?(?:</\1\s*>|\Z)'  # raw text
    r'|<(/?)([A-Za-z][A-Za-z0-9:-]{0,64})[^<>]{0,4096}>',  # a tag (bounded: no scan to the end per `<`)
    re.IGNORECASE | re.DOTALL,
)
_NO_DEPTH = frozenset(
    {
        *('area', 'base', 'br', 'col', 'embed', 'hr', 'img', 'input', 'link', 'meta', 'param', 'source', 'track'),
        *('wbr', 'keygen'),  # (void elements)
        *('p', 'li', 'dt', 'dd', 'tr', 'td', 'th', 'option', 'optgroup', 'rb', 'rt', 'rp', 'rtc', 'thead', 'tbody'),
        *('tfoot', 'colgroup', 'caption', 'head', 'body', 'html'),
    }
)
"""Void elements, and elements a sibling closes (an unclosed `<li>` list is not deep): not counted as depth."""


def _shallow(html: str) -> str:
    """`html` with the tags of elements nested deeper than `MAX_HTML_DEPTH` removed (their text stays).

    Only pages with more start tags left open than that are read tag by tag (`str.count` tells, at C speed: a single
    count for a page of at most 4,096 tags, whose nesting the parser reads fast whatever it is). The depth is counted
    as tags open and close, each end tag closing the innermost element of its name when it is on top (a close that
    does not match is ignored), which over-counts only for hostile or broken markup.
    """
    tags = html.count('<')
    if tags <= 4 * MAX_HTML_DEPTH or tags - 2 * html.count('</') <= MAX_HTML_DEPTH:
        return html  # (few enough tags that any nesting parses fast; or few left open)
    out: list[str] = []
    pos = 0
    depth = 0  # kept elements open
    stack: list[tuple[str, bool]] = []  # open elements: name, whether its tags are dropped
    for tag in _TAG_RE.finditer(html):
        name = tag.group(3)
        if name is None or (name := name.lower()) in _NO_DEPTH:
            continue
        if tag.group(2):  # an end tag
            if not stack or stack[-1][0] != name:
                continue
            _, dropped = stack.pop()
            if not dropped:
                depth -= 1
                continue
        else:
            dropped = depth >= MAX_HTML_DEPTH
            stack.append((name, dropped))
            if not dropped:
                depth += 1
                continue
        out.append(html[pos : tag.start()])
        pos = tag.end()
    out.append(html[pos:])
    return ''.join(out)


def _html_blocks(html: str) -> _Builder:
    tree = LexborHTMLParser(_shallow(html))
    root = tree.body or tree.root
    if root is None:
        return _Builder([], [])
    # Elements marked `hidden`, found by lexbor's selector engine once (reading each element's attributes is slow), are
    # taken out of the tree, innermost first (taking one out frees what it holds); a hidden `br` still breaks a line.
    for node in reversed(root.css('[hidden]')):
        if node.mem_id == root.mem_id:
            return _Builder([], [])
        if node.tag != 'br':
            node.decompose()
    kind = _KINDS.get(root.tag, _INLINE)
    return _Builder([], []) if kind >= _SKIP else _walk(root, kind)


def _walk(root: LexborNode, root_kind: int) -> _Builder:
    """The blocks of `root`'s text: the walk of the module docstring, its state in local variables.

    Iterative pre-order walk from child to child and sibling to sibling (deep junk must not hit the recursion limit): a
    stack of the open elements, each with its kind, to close it and go on with its next sibling. The walk visits every
    node of the page, so what it does at each is written out here rather than called.
    """
    out = _Builder([], [])
    parts = out.parts
    add = parts.append
    flush = out.flush
    kinds: dict[int, int] = {}  # kinds by tag id, memoised for this page: custom elements get ids of their document
    stack: list[tuple[LexborNode, int]] = [(root, root_kind)]
    push, pop = stack.append, stack.pop
    depth = int(root_kind == _CONTAINER)  # open layout containers
    marked = 0  # how many of them (outermost first) already hold text
    pending = last_br = False  # a container that held text has ended; the last thing seen was a `br`
    node = root.first_child
    while stack:
        while node is not None:
            kind = kinds.get(node.tag_id) or _kind(kinds, node)
            if kind == _TEXT:
                if node.is_empty_text_node:  # spaces between tags (most text nodes): not read, not kept before words
                    if parts:
                        add(' ')
                    node = node.next
                    continue
                text = node.text_content or ''  # ('' has no text, and `''.isspace()` is false)
                if text and not text.isspace():
                    if pending | (marked < depth):
                        # First text after a container, or inside a container opened since the last text. Empty
                        # containers (ad slots, clearfix divs) never get here, so they never split a sentence.
                        flush()
                        pending = False
                    marked, last_br = depth, False
                add(text)
            elif kind < _SKIP:
                if kind == _BLOCK:
                    if parts:
                        flush()
                    pending = last_br = False
                depth += kind == _CONTAINER
                push((node, kind))
                node = node.first_child
                continue
            elif kind == _BR:  # two in a row end a passage
                last_br = _br(out, last_br)
            node = node.next
        node, kind = pop()
        if kind == _BLOCK:
            if parts:
                flush()
            pending = last_br = False
        elif kind == _CONTAINER:
            pending |= marked >= depth  # it held text: keep that text apart from what follows
            depth -= 1
            marked, last_br = min(marked, depth), False
        node = node.next if stack else None  # (the root's siblings are not walked)
    flush()
    return out


def _kind(kinds: dict[int, int], node: LexborNode) -> int:
    """The kind of `node`, memoised by tag id in `kinds`."""
    kind = kinds[node.tag_id] = _KINDS.get(node.tag, _INLINE)
    return kind


def _br(out: _Builder, last_br: bool) -> bool:
    if last_br:
        out.flush()
    else:
        out.add(' ')
    return True


def _markdown_item(line: str) -> tuple[Literal['heading', 'item', 'rule', 'table', 'text'], str]:
    """Classify one line (quote markers already removed) and return its content without the marker."""
    stripped = line.strip()
    if stripped.startswith('#'):
        level = len(stripped) - len(stripped.lstrip('#'))
        rest = stripped[level:]
        if level <= 6 and (not rest or rest[0] in ' \t'):
            return 'heading', rest.strip().rstrip('#')
    if len(stripped) >= 3 and stripped[0] in '-*_=' and set(stripped.replace(' ', '')) == {stripped[0]}:
        return 'rule', ''
    if stripped[:2] in ('- ', '* ', '+ '):
        return 'item', stripped[2:]
    digits = len(stripped) - len(stripped.lstrip('0123456789'))
    if 0 < digits <= 9 and stripped[digits : digits + 2] in ('. ', ') '):
        return 'item', stripped[digits + 2 :]
    if stripped.startswith('|'):
        return 'table', stripped
    return 'text', line


@dataclass
class _TextBuilder:
    """A `_Builder` for Markdown and plain text, which records where each block's first line starts."""

    builder: _Builder
    starts: list[int]  # offset of the first line of the current buffer, for positions

    def flush(self) -> None:
        builder = self.builder
        before = len(builder.blocks)
        builder.flush()
        if len(builder.blocks) > before and self.starts:
            text, words, _ = builder.blocks[-1]
            builder.blocks[-1] = (text, words, self.starts[0])
        self.starts.clear()

    def add(self, content: str, at: int) -> None:
        if not self.starts:
            self.starts.append(at)
        self.builder.add(content + '\n')

    def line(self, content: str, at: int) -> None:
        """One non-blank line outside code fences (quote markers already removed)."""
        kind, rest = _markdown_item(content)
        if kind == 'heading':
            self.flush()
            self.add(rest, at)
            self.flush()
        elif kind == 'rule':
            self.flush()
        elif kind == 'item':
            self.flush()
            self.add(rest, at)
        elif kind == 'table':
            self.flush()
            cells = [cell.strip() for cell in rest.strip('|').split('|')]
            if all(set(cell) <= set('-: ') for cell in cells):
                return
            for cell in cells:
                self.add(cell, at)
                self.flush()
        else:
            self.add(rest, at)


_QUOTE_MARKERS_RE = re.compile(r'(?:\s*>)+')
"""The `>` markers that open a Markdown line of a (nested) quote, with the white space before each."""


def _text_blocks(text: str) -> _Builder:
    """Markdown and plain text: blank lines, `#` headings, list items, `>` quotes and table cells end passages."""
    out = _TextBuilder(_Builder([], []), [])
    in_quote = False
    in_fence = False
    offset = 0
    for line in text.splitlines(keepends=True):
        at = offset
        offset += len(line)
        body = line.rstrip('\r\n')
        if body.strip().startswith(('```', '~~~')):
            out.flush()
            in_fence = not in_fence
            continue
        if in_fence:
            out.add(body, at)
            continue
        markers = _QUOTE_MARKERS_RE.match(body)  # every `>` of a nested quote at once (a loop copied the line each)
        quoted = markers is not None
        content = body if markers is None else body[markers.end() :]
        if quoted != in_quote:
            out.flush()
            in_quote = quoted
        if not content.strip():
            out.flush()
            continue
        out.line(content, at)
    out.flush()
    # Positions of text pages are offsets into the original text.
    out.builder.length = max(len(text), 1)
    return out.builder


def looks_like_html(text: str) -> bool:
    """Whether `text` is HTML rather than Markdown or plain text.

    True when it starts with a tag or declaration, or when parsing it finds an element that only HTML
    writes (a paragraph, a `div`, a list, a table...); Markdown with the odd inline `<br>` stays Markdown.
    """
    head = text.lstrip()[:64].lower()
    if head.startswith(('<!doctype', '<html', '<?xml', '<!--', '<head', '<body', '<meta')):
        return True
    if '<' not in text:
        return False
    tree = LexborHTMLParser(text[:200_000])
    root = tree.body
    if root is None:
        return False
    if head.startswith('<') and root.child is not None and root.child.tag not in (None, '-text'):
        return True
    return any(node.tag in _HTML_HINTS for node in root.traverse(include_text=False))


def split_passages(
    html_or_text: str, *, min_words: int = DEFAULT_MIN_PASSAGE_WORDS, kind: PageKind = 'auto'
) -> list[Passage]:
    """Split a page into passages, one per content block, dropping blocks shorter than `min_words`.

    Boundaries are the ends of content blocks: paragraphs, list items, headings, table cells, block quotes
    (for Markdown and plain text: blank lines, `#` headings, `-`/`*`/`+`/`1.` list items, `>` quotes, table
    cells). Layout containers such as `div` are not passages (see the module docstring). Only the HTML body
    counts; script, style, noscript, svg, template and similar content is dropped; entities are unescaped
    and whitespace folded.

    Args:
        html_or_text: The page: HTML, Markdown or plain text.
        min_words: Blocks with fewer whitespace-separated words are dropped (navigation crumbs, button labels);
            default 5 (`DEFAULT_MIN_PASSAGE_WORDS`). At least 1.
        kind: `'auto'` guesses with `looks_like_html`; `'html'`, `'markdown'` or `'text'` force a parser
            (Markdown and plain text share one).

    Returns:
        The kept passages in page order; `position` is where each starts in the visible text, 0 to 1.
    """
    require('split_passages', 'html_or_text', html_or_text, str, 'the page as a str (decode bytes with `decode_body`)')
    require_at_least('split_passages', 'min_words', min_words, 1, int, 'an int of at least 1')
    if kind not in ('auto', 'html', 'markdown', 'text'):
        raise UserError(f'Unknown page kind {kind!r}: use "auto", "html", "markdown" or "text".')
    if not html_or_text.strip():
        return []
    is_html = kind == 'html' or (kind == 'auto' and looks_like_html(html_or_text))
    builder = _html_blocks(html_or_text) if is_html else _text_blocks(html_or_text)
    total = max(builder.length, 1)
    out: list[Passage] = []
    for text, words, start in builder.blocks:
        if words >= min_words:
            out.append(Passage(text=text, index=len(out), position=min(start / total, 1.0), word_count=words))
    return out

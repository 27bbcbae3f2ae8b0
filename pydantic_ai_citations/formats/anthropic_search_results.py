"""Anthropic `search_result` blocks and `search_result_location` citations, on raw request messages.

Pydantic AI 2.68 has no input type for `search_result` blocks and ignores `search_result_location`
citations, so this module works on the raw Messages API data: `messages` is the `messages` list of a
request body (`{'role': 'user' | 'assistant', 'content': str | list[block]}`).

`search_result_index` is the 0-based position of the cited block among **all** `search_result` blocks of
**that request**, in order of appearance across messages, at the top level of user content and inside
`tool_result.content` alike; two blocks with the same `source` get two indexes. It is only meaningful
against the messages of the request that produced it: after old messages are dropped, use
`reindex_after_trim`. `start_block_index`/`end_block_index` are a half-open range over the cited block's
text blocks, and `cited_text` is their concatenation.

Source kind: a `source` that is an `http`/`https` URL with a host becomes a `WebCitationSource`;
anything else (a document id, a path, a name) a `DocumentCitationSource` with it as `document_id`.
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from pydantic import JsonValue
from pydantic_ai import (
    Citation,
    ContentCitationAnchor,
    DocumentCitationSource,
    MarkerCitationAnchor,
    WebCitationSource,
)

from .._problems import CitationProblem, ProblemCode, shorten
from ._raw import as_int

__all__ = (
    'Messages',
    'SearchResultBlock',
    'ResolvedSearchResult',
    'search_result_blocks',
    'locate',
    'resolve',
    'reindex_after_trim',
    'check_request',
    'is_web_source',
    'search_result_source',
)

Messages = Sequence[Mapping[str, JsonValue]]
"""The `messages` list of an Anthropic Messages API request body."""

_DETAIL_MAX = 80


@dataclass(frozen=True)
class SearchResultBlock:
    """One `search_result` block of a request, in request order."""

    index: int
    """Its `search_result_index`: position among all `search_result` blocks of the request."""
    message_index: int
    """Index of the message holding it."""
    path: tuple[int, ...]
    """Where it sits in that message's `content`: `(i,)` at top level, `(i, j)` as item `j` of the
    `tool_result` block at `content[i]`."""
    source: str
    """Its `source` (`''` if missing or not a string; `check_request` reports that)."""
    title: str | None
    """Its `title`, if a string."""
    texts: tuple[str, ...]
    """The `text` of each of its content blocks, in order (`''` for a block that is not a text block)."""
    citations_enabled: bool
    """Its `citations.enabled` (off unless set to `true`)."""
    raw: Mapping[str, JsonValue]
    """The block as given."""


@dataclass(frozen=True)
class ResolvedSearchResult:
    """A `search_result_location` citation checked against the request's blocks."""

    block: SearchResultBlock
    """The cited block."""
    start_block_index: int
    """First cited text block of `block` (0-based)."""
    end_block_index: int
    """End of the cited text blocks (exclusive)."""
    cited_text: str
    """The cited text, taken from the blocks (equal to the citation's `cited_text`, whitespace aside)."""

    @property
    def source(self) -> str:
        """The cited block's `source`."""
        return self.block.source

    @property
    def title(self) -> str | None:
        """The cited block's `title`."""
        return self.block.title


# `repr` of provider data with bounded depth and size: a deeply nested value must not raise RecursionError here.
def _bounded_repr() -> reprlib.Repr:
    r = reprlib.Repr()  # keyword arguments only from Python 3.12
    r.maxlevel, r.maxdict, r.maxlist, r.maxstring, r.maxother = 4, 8, 8, _DETAIL_MAX, _DETAIL_MAX
    return r


_REPR = _bounded_repr()


def _detail(value: object) -> str:
    return shorten(_REPR.repr(value), _DETAIL_MAX)


def _messages(messages: object) -> list[Mapping[str, JsonValue] | None]:
    """The request's messages, positions kept; anything that is not a message object becomes `None`.

    The messages are provider data: a body with `None`, a string or a number where a message belongs must be
    reported (`check_request`), not crash the reader.
    """
    if not isinstance(messages, (list, tuple)):
        return []
    items: Sequence[object] = messages  # pyright: ignore[reportUnknownVariableType]
    return [m if isinstance(m, Mapping) else None for m in items]  # pyright: ignore[reportUnknownVariableType]


def _content_list(content: JsonValue) -> list[JsonValue]:
    return content if isinstance(content, list) else []


def _block_type(block: JsonValue) -> str | None:
    if isinstance(block, dict):
        kind = block.get('type')
        return kind if isinstance(kind, str) else None
    return None


def _make_block(
    index: int, message_index: int, path: tuple[int, ...], block: dict[str, JsonValue]
) -> SearchResultBlock:
    source = block.get('source')
    title = block.get('title')
    texts: list[str] = []
    for item in _content_list(block.get('content')):
        text = item.get('text') if isinstance(item, dict) and item.get('type') == 'text' else None
        texts.append(text if isinstance(text, str) else '')
    citations = block.get('citations')
    enabled = isinstance(citations, dict) and citations.get('enabled') is True
    return SearchResultBlock(
        index=index,
        message_index=message_index,
        path=path,
        source=source if isinstance(source, str) else '',
        title=title if isinstance(title, str) else None,
        texts=tuple(texts),
        citations_enabled=enabled,
        raw=block,
    )


def search_result_blocks(messages: Messages) -> list[SearchResultBlock]:
    """All `search_result` blocks of a request, in the order that defines `search_result_index`.

    Counted at the top level of each message's content and inside each `tool_result`'s content, in order
    of appearance, whatever the message's role (an assistant message holding one makes the request
    invalid, see `check_request`, but the count is the same).
    """
    found: list[SearchResultBlock] = []
    for message_index, message in enumerate(_messages(messages)):
        if message is None:
            continue
        for i, block in enumerate(_content_list(message.get('content'))):
            kind = _block_type(block)
            if kind == 'search_result' and isinstance(block, dict):
                found.append(_make_block(len(found), message_index, (i,), block))
            elif kind == 'tool_result' and isinstance(block, dict):
                for j, inner in enumerate(_content_list(block.get('content'))):
                    if _block_type(inner) == 'search_result' and isinstance(inner, dict):
                        found.append(_make_block(len(found), message_index, (i, j), inner))
    return found


def _same_text(a: str, b: str) -> bool:
    return a == b or a.split() == b.split()


def locate(
    citation: Mapping[str, JsonValue], messages: Messages, *, citation_index: int | None = None
) -> ResolvedSearchResult | CitationProblem:
    """Check a `search_result_location` citation against the messages of the request that produced it.

    Args:
        citation: The raw citation (`type`, `search_result_index`, `source`, `title`, `cited_text`,
            `start_block_index`, `end_block_index`).
        messages: The `messages` of that same request.
        citation_index: Where the citation sits in its raw list, copied onto a problem.

    Returns:
        The resolved block and cited text, or the problem: `unreadable_raw_data` (not a readable
        `search_result_location`), `search_result_index_out_of_range`, `conflicting_source_id` (the block at
        that index has another `source` or `title`: the index belongs to another request),
        `anchor_out_of_range` (block range outside the block), `quote_not_found` (`cited_text` is not the
        text of those blocks).
    """

    def problem(code: ProblemCode, message: str, detail: object) -> CitationProblem:
        return CitationProblem(code, message, citation_index=citation_index, detail=_detail(detail))

    if not isinstance(citation, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance] - provider data
        return problem('unreadable_raw_data', 'a citation must be an object', citation)
    if citation.get('type') != 'search_result_location':
        return problem('unreadable_raw_data', 'not a search_result_location citation', citation.get('type'))
    index = as_int(citation.get('search_result_index'))
    start = as_int(citation.get('start_block_index'))
    end = as_int(citation.get('end_block_index'))
    if index is None or start is None or end is None:
        return problem(
            'unreadable_raw_data',
            'search_result_location citation without integer search_result_index/start_block_index/end_block_index',
            dict(citation),
        )
    blocks = search_result_blocks(messages)
    if not 0 <= index < len(blocks):
        return problem(
            'search_result_index_out_of_range',
            f'search_result_index {index} but the request has {len(blocks)} search_result blocks',
            index,
        )
    block = blocks[index]
    source = citation.get('source')
    if isinstance(source, str) and source != block.source:
        return problem(
            'conflicting_source_id',
            f'citation names source {source!r} but search result {index} of this request is {block.source!r}; '
            'the index was probably computed against another request',
            source,
        )
    title = citation.get('title')
    if isinstance(title, str) and block.title is not None and title != block.title:
        return problem(
            'conflicting_source_id',
            f'citation names title {title!r} but search result {index} of this request has {block.title!r}',
            title,
        )
    if not 0 <= start < end <= len(block.texts):
        return problem(
            'anchor_out_of_range',
            f'block range [{start}, {end}) is outside search result {index}, which has {len(block.texts)} text blocks',
            [start, end],
        )
    text = ''.join(block.texts[start:end])
    cited = citation.get('cited_text')
    if isinstance(cited, str) and not _same_text(cited, text):
        return problem(
            'quote_not_found',
            f'cited_text is not the text of blocks [{start}, {end}) of search result {index}',
            cited,
        )
    return ResolvedSearchResult(block=block, start_block_index=start, end_block_index=end, cited_text=text)


def is_web_source(source: str) -> bool:
    """Whether a `search_result` `source` is an `http`/`https` URL with a host (then cited as a web page)."""
    if not isinstance(source, str):  # pyright: ignore[reportUnnecessaryIsInstance] - provider data
        return False
    try:
        parts = urlsplit(source)
    except ValueError:
        return False
    return parts.scheme.lower() in ('http', 'https') and bool(parts.netloc)


def search_result_source(
    source: str | None, title: str | None, cited_text: str | None
) -> WebCitationSource | DocumentCitationSource | None:
    """The Pydantic AI source for a cited `search_result`, or `None` when it has nothing to cite.

    A web page when `source` is an `http(s)` URL with a host (`is_web_source`), else a document named by `source`;
    the cited text is the one excerpt. `resolve` and the unmapped-data recovery both cite through this.
    """
    # Provider data: a value of the wrong type counts as absent.
    source = source if isinstance(source, str) else None  # pyright: ignore[reportUnnecessaryIsInstance]
    title = title if isinstance(title, str) else None  # pyright: ignore[reportUnnecessaryIsInstance]
    excerpts = [cited_text] if isinstance(cited_text, str) and cited_text else []
    if source and is_web_source(source):
        return WebCitationSource(source, title=title, excerpts=excerpts)
    if source or title or excerpts:
        return DocumentCitationSource(document_id=source or None, title=title, excerpts=excerpts)
    return None


def resolve(
    citation: Mapping[str, JsonValue],
    messages: Messages,
    *,
    anchor: ContentCitationAnchor | MarkerCitationAnchor | None = None,
    citation_index: int | None = None,
) -> Citation | CitationProblem:
    """Resolve a `search_result_location` citation (see `locate`) into a Pydantic AI `Citation`.

    The source is a `WebCitationSource(url=source)` when `source` is an `http(s)` URL, else a
    `DocumentCitationSource(document_id=source)`; either way with the block's title and the cited text as
    the one excerpt.

    Args:
        citation: The raw citation.
        messages: The `messages` of the request that produced it.
        anchor: Where the cited claim sits in the text part, if known (Anthropic anchors the text block the
            citation is attached to; the caller knows its offsets).
        citation_index: Where the citation sits in its raw list, copied onto a problem.
    """
    resolved = locate(citation, messages, citation_index=citation_index)
    if isinstance(resolved, CitationProblem):
        return resolved
    source = search_result_source(resolved.source, resolved.title, resolved.cited_text)
    if source is None:
        return CitationProblem(
            'source_without_content',
            f'search result {resolved.block.index} has no source, title or text to cite',
            citation_index=citation_index,
        )
    return Citation(sources=[source], anchor=anchor)


def _align_backwards(old: Messages, new: Messages) -> dict[int, int] | None:
    """Map old message indexes to new ones, `new` being `old` with messages removed (matched from the end)."""
    old_list, new_list = _messages(old), _messages(new)
    mapping: dict[int, int] = {}
    i = len(old_list) - 1
    try:
        for j in range(len(new_list) - 1, -1, -1):
            while i >= 0 and old_list[i] != new_list[j]:
                i -= 1
            if i < 0:
                return None
            mapping[i] = j
            i -= 1
    except RecursionError:  # messages nested too deeply to compare: they cannot be matched
        return None
    return mapping


def reindex_after_trim(
    citation: Mapping[str, JsonValue], old_messages: Messages, new_messages: Messages
) -> dict[str, JsonValue] | CitationProblem:
    """Carry a `search_result_location` citation from one request over to a trimmed history.

    `new_messages` must be `old_messages` with some messages removed (others unchanged); messages are
    matched from the end, as trimming drops the oldest. The citation is first resolved against
    `old_messages` (the request that produced it); the same block (same message, same position) is then
    looked up in `new_messages`.

    Returns:
        A copy of the citation with the block's `search_result_index` in the new request, or a problem:
        whatever `locate` reports against the old messages, or `search_result_index_out_of_range` when the
        block's message was removed or `new_messages` is not a trimmed `old_messages`.
    """
    resolved = locate(citation, old_messages)
    if isinstance(resolved, CitationProblem):
        return resolved
    mapping = _align_backwards(old_messages, new_messages)
    if mapping is None:
        return CitationProblem(
            'search_result_index_out_of_range',
            'new messages are not the old messages with some removed; the search result cannot be located',
            detail=_detail(resolved.block.index),
        )
    new_message_index = mapping.get(resolved.block.message_index)
    if new_message_index is None:
        return CitationProblem(
            'search_result_index_out_of_range',
            f'search result {resolved.block.index} ({resolved.source!r}) was in message '
            f'{resolved.block.message_index}, which is no longer in the history',
            detail=_detail(resolved.block.index),
        )
    for block in search_result_blocks(new_messages):
        if block.message_index == new_message_index and block.path == resolved.block.path:
            return {**citation, 'search_result_index': block.index}
    # Unreachable when the message is unchanged; kept so a mismatch is reported, never guessed.
    return CitationProblem(  # pragma: no cover - unreachable, see the comment above
        'search_result_index_out_of_range',
        f'search result {resolved.block.index} not found in the trimmed history',
        detail=_detail(resolved.block.index),
    )


def check_request(messages: Messages) -> list[CitationProblem]:
    """Report what the API would reject about `search_result` blocks in a request, before sending it.

    Reported as `invalid_search_result`: a `search_result` in an assistant message; a `search_result` whose
    `source` or `title` is not a string or whose `content` is not a list of text blocks; blocks whose
    `citations.enabled` differs from the first block's (the setting must be the same on all blocks of a
    request).
    """
    problems: list[CitationProblem] = []
    listed = _messages(messages)
    if not isinstance(messages, (list, tuple)):
        problems.append(
            CitationProblem(
                'unreadable_raw_data', 'messages must be a list of message objects', detail=_detail(messages)
            )
        )
    for message_index, message in enumerate(listed):
        if message is None:
            problems.append(
                CitationProblem(
                    'unreadable_raw_data',
                    f'message {message_index} is not a message object',
                    message_index=message_index,
                    detail=_detail(messages[message_index]),
                )
            )
    first: SearchResultBlock | None = None
    for block in search_result_blocks(messages):
        part_index = block.path[0]
        message = listed[block.message_index]
        role = None if message is None else message.get('role')
        where = f'search result {block.index} (message {block.message_index}, content {list(block.path)})'
        if role != 'user':
            problems.append(
                CitationProblem(
                    'invalid_search_result',
                    f'{where} is in a {role!r} message; search_result blocks are only allowed in user content',
                    message_index=block.message_index,
                    part_index=part_index,
                    detail=_detail(role),
                )
            )
        raw = block.raw
        content = raw.get('content')
        bad_content = not isinstance(content, list) or not all(
            isinstance(item, dict) and item.get('type') == 'text' and isinstance(item.get('text'), str)
            for item in content
        )
        if not isinstance(raw.get('source'), str) or not isinstance(raw.get('title'), str) or bad_content:
            problems.append(
                CitationProblem(
                    'invalid_search_result',
                    f'{where} needs a string source, a string title and content made of text blocks',
                    message_index=block.message_index,
                    part_index=part_index,
                    detail=_detail(dict(raw)),
                )
            )
        if first is None:
            first = block
        elif block.citations_enabled != first.citations_enabled:
            problems.append(
                CitationProblem(
                    'invalid_search_result',
                    f'{where} has citations enabled={block.citations_enabled} but search result {first.index} '
                    f'has enabled={first.citations_enabled}; the setting must be the same on every block',
                    message_index=block.message_index,
                    part_index=part_index,
                    detail=_detail(raw.get('citations')),
                )
            )
    return problems

"""Wire accounting: count the provider's OWN citation objects in a raw response body.

`count_wire_citations(api, payload)` reads what the provider sent, before any Pydantic AI mapping, so the matrix
can compare "cited on the wire" with "arrived on `TextPart.citations`". A payload is a JSON object (a non-streamed
body), a list of decoded stream event objects (SSE `data` objects, decoded Bedrock event dicts, xAI chunk json),
or for xAI a response json. Every returned `WireCitation` has a `key` built from the citation's own content and
where it sits (item / block / choice), never from its position in the payload, so the same object seen in a
stream event, a `*.done` snapshot and the final body is counted once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal, cast

from pydantic import JsonValue, TypeAdapter
from pydantic_ai.exceptions import UserError

from .._models import PROVIDER_APIS, ProviderApi
from ._raw import as_int, as_list, as_map, as_maps, as_str
from ._sse import load_json, sse_data
from .numbered import extract_numbered
from .perplexity import AgentStreamCollector

__all__ = ('WIRE_APIS', 'WireApi', 'WireCitation', 'count_wire_citations', 'parse_sse', 'wire_citations_ta')

WireApi = ProviderApi
"""The provider APIs whose raw citation objects can be counted: all of them."""

WIRE_APIS: tuple[WireApi, ...] = PROVIDER_APIS

_EMPTY: Mapping[str, object] = {}


@dataclass(frozen=True)
class WireCitation:
    """One citation object as the provider sent it."""

    api: WireApi
    """Which API sent it."""
    kind: str
    """The provider's own type name, e.g. `'url_citation'`, `'char_location'`, `'grounding_support'`."""
    key: str
    """Stable identity: equal for the same object in a stream event, a snapshot and the final body."""
    url: str | None = None
    """The cited URL, if any."""
    document_id: str | None = None
    """The cited document's id (file id, document index, chunk id), if any."""
    title: str | None = None
    """The cited source's title, if any."""
    start: int | None = None
    """Start offset into the answer text, if the provider gives one."""
    end: int | None = None
    """End offset into the answer text, if the provider gives one."""
    offset_unit: Literal['char', 'utf8_byte'] | None = None
    """Unit of `start`/`end`: Python characters (for most APIs) or UTF-8 bytes (Google)."""
    source_start: int | None = None
    """Start of the cited range inside the *source* (document chars or pages), if given."""
    source_end: int | None = None
    """End of the cited range inside the source, if given."""


wire_citations_ta: TypeAdapter[list[WireCitation]] = TypeAdapter(list[WireCitation])
"""JSON round trip for lists of wire citations."""


def parse_sse(text: str | bytes) -> list[dict[str, JsonValue]]:
    """Decode an SSE body into its `data` JSON objects (skipping `[DONE]` and anything that is not an object)."""
    events = (load_json(data) for data in sse_data(text))
    return [cast('dict[str, JsonValue]', event) for event in events if isinstance(event, dict)]


def count_wire_citations(api: WireApi, payload: JsonValue) -> list[WireCitation]:
    """Count the provider's own citation objects in `payload`, each once.

    Args:
        api: Which API produced the payload (see `WireApi`).
        payload: A body object, or a list of stream event objects.

    Returns:
        The distinct citation objects, in order of first appearance.
    """
    handler = _HANDLERS.get(api)
    if handler is None:
        raise UserError(f'Unknown wire API {api!r}; expected one of {", ".join(WIRE_APIS)}.')
    seen: dict[str, WireCitation] = {}
    for citation in handler(api, _objects(payload)):
        seen.setdefault(citation.key, citation)
    return list(seen.values())


# -- helpers ---------------------------------------------------------------------------------------------------


def _objects(payload: object) -> list[Mapping[str, object]]:
    if isinstance(payload, Mapping):
        return [cast('Mapping[str, object]', payload)]
    return [m for item in as_list(payload) if (m := as_map(item)) is not None]


def _dig(value: object, *path: str) -> object:
    for name in path:
        m = as_map(value)
        if m is None:
            return None
        value = m.get(name)
    return value


def _key(*parts: object) -> str:
    return json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False)


_Handler = Callable[[WireApi, list[Mapping[str, object]]], Iterable[WireCitation]]


# -- Anthropic Messages ----------------------------------------------------------------------------------------


def _anthropic_one(api: WireApi, block_index: object, citation: Mapping[str, object]) -> WireCitation:
    kind = as_str(citation.get('type')) or 'unknown'
    start = as_int(citation.get('start_char_index'))
    end = as_int(citation.get('end_char_index'))
    if kind == 'page_location':
        start, end = as_int(citation.get('start_page_number')), as_int(citation.get('end_page_number'))
    elif kind in ('content_block_location', 'search_result_location'):
        start, end = as_int(citation.get('start_block_index')), as_int(citation.get('end_block_index'))
    doc = as_str(citation.get('file_id')) or as_str(citation.get('source'))
    for index_field in ('document_index', 'search_result_index'):
        if doc is None and (index := as_int(citation.get(index_field))) is not None:
            doc = f'{index_field}:{index}'
    return WireCitation(
        api,
        kind,
        _key('anthropic', block_index, dict(citation)),
        url=as_str(citation.get('url')),
        document_id=doc,
        title=as_str(citation.get('title')) or as_str(citation.get('document_title')),
        source_start=start,
        source_end=end,
    )


def _anthropic(api: WireApi, objs: list[Mapping[str, object]]) -> Iterator[WireCitation]:
    for obj in objs:
        kind = obj.get('type')
        if kind == 'content_block_delta':
            delta = as_map(obj.get('delta'))
            if delta is not None and delta.get('type') == 'citations_delta' and (c := as_map(delta.get('citation'))):
                yield _anthropic_one(api, obj.get('index'), c)
        elif kind == 'content_block_start':
            block = as_map(obj.get('content_block'))
            for c in as_maps(block.get('citations') if block else None):
                yield _anthropic_one(api, obj.get('index'), c)
        else:
            # a message body, or a `message_start` event carrying one
            message = as_map(obj.get('message')) if kind == 'message_start' else obj
            for index, block in enumerate(as_maps(message.get('content') if message else None)):
                for c in as_maps(block.get('citations')):
                    yield _anthropic_one(api, index, c)


# -- Bedrock Converse ------------------------------------------------------------------------------------------


def _bedrock_one(api: WireApi, block_index: object, citation: Mapping[str, object]) -> WireCitation:
    location = as_map(citation.get('location')) or _EMPTY
    kind = next(iter(location), 'unknown')
    loc = as_map(location.get(kind)) or _EMPTY
    doc_index = as_int(loc.get('documentIndex'))
    return WireCitation(
        api,
        kind,
        _key('bedrock', block_index, dict(citation)),
        url=as_str(loc.get('url')),
        document_id=f'documentIndex:{doc_index}' if doc_index is not None else None,
        title=as_str(citation.get('title')) or as_str(loc.get('domain')),
        source_start=as_int(loc.get('start')),
        source_end=as_int(loc.get('end')),
    )


def _bedrock(api: WireApi, objs: list[Mapping[str, object]]) -> Iterator[WireCitation]:
    for obj in objs:
        event = as_map(obj.get('contentBlockDelta')) or obj
        if (c := as_map(_dig(event, 'delta', 'citation'))) is not None:
            yield _bedrock_one(api, event.get('contentBlockIndex'), c)
            continue
        content = _dig(obj, 'output', 'message', 'content')
        for index, block in enumerate(as_maps(content)):
            for c in as_maps(_dig(block, 'citationsContent', 'citations')):
                yield _bedrock_one(api, index, c)


# -- OpenAI Responses ------------------------------------------------------------------------------------------


def _responses_one(api: WireApi, item_id: object, content_index: object, ann: Mapping[str, object]) -> WireCitation:
    start, end = as_int(ann.get('start_index')), as_int(ann.get('end_index'))
    if start is None and (index := as_int(ann.get('index'))) is not None:
        start = index  # file_citation: a single position, not a range
    return WireCitation(
        api,
        as_str(ann.get('type')) or 'unknown',
        _key('responses', item_id, content_index, dict(ann)),
        url=as_str(ann.get('url')),
        document_id=as_str(ann.get('file_id')),
        title=as_str(ann.get('title')) or as_str(ann.get('filename')),
        start=start,
        end=end,
        offset_unit='char' if start is not None else None,
    )


def _responses_item(api: WireApi, item: Mapping[str, object]) -> Iterator[WireCitation]:
    for content_index, content in enumerate(as_maps(item.get('content'))):
        for ann in as_maps(content.get('annotations')):
            yield _responses_one(api, item.get('id'), content_index, ann)


def _openai_responses(api: WireApi, objs: list[Mapping[str, object]]) -> Iterator[WireCitation]:
    for obj in objs:
        kind = obj.get('type')
        if kind == 'response.output_text.annotation.added' and (ann := as_map(obj.get('annotation'))):
            yield _responses_one(api, obj.get('item_id'), obj.get('content_index'), ann)
        elif kind == 'response.content_part.done' and (part := as_map(obj.get('part'))):
            for ann in as_maps(part.get('annotations')):
                yield _responses_one(api, obj.get('item_id'), obj.get('content_index'), ann)
        elif kind in ('response.output_item.done', 'response.output_item.added') and (item := as_map(obj.get('item'))):
            yield from _responses_item(api, item)
        else:
            body = as_map(obj.get('response')) if isinstance(kind, str) and kind.startswith('response.') else obj
            for item in as_maps(body.get('output') if body else None):
                yield from _responses_item(api, item)


# -- OpenAI Chat Completions / OpenRouter ----------------------------------------------------------------------


def _chat(api: WireApi, objs: list[Mapping[str, object]]) -> Iterator[WireCitation]:
    for obj in objs:
        for choice in as_maps(obj.get('choices')):
            message = as_map(choice.get('message')) or as_map(choice.get('delta')) or _EMPTY
            for ann in as_maps(message.get('annotations')):
                inner = as_map(ann.get(as_str(ann.get('type')) or '')) or ann
                start, end = as_int(inner.get('start_index')), as_int(inner.get('end_index'))
                yield WireCitation(
                    api,
                    as_str(ann.get('type')) or 'unknown',
                    _key('chat', choice.get('index'), dict(ann)),
                    url=as_str(inner.get('url')),
                    document_id=as_str(inner.get('file_id')),
                    title=as_str(inner.get('title')) or as_str(inner.get('filename')),
                    start=start,
                    end=end,
                    offset_unit='char' if start is not None else None,
                )


# -- Google Gemini / Vertex ------------------------------------------------------------------------------------


def _google(api: WireApi, objs: list[Mapping[str, object]]) -> Iterator[WireCitation]:
    for obj in objs:
        for candidate in as_maps(obj.get('candidates')):
            cand_index = candidate.get('index', 0)
            meta = as_map(candidate.get('groundingMetadata')) or _EMPTY
            for support in as_maps(meta.get('groundingSupports')):
                segment = as_map(support.get('segment')) or _EMPTY
                start, end = as_int(segment.get('startIndex')) or 0, as_int(segment.get('endIndex'))
                yield WireCitation(
                    api,
                    'grounding_support',
                    _key('google-support', cand_index, segment.get('partIndex'), start, end, segment.get('text')),
                    start=start,
                    end=end,
                    offset_unit='utf8_byte',
                )
            # Supports point at chunks by index, so two equal chunks at two indexes are two objects.
            for chunk_index, chunk in enumerate(as_maps(meta.get('groundingChunks'))):
                kind = next(iter(chunk), 'unknown')
                inner = as_map(chunk.get(kind)) or _EMPTY
                url = as_str(inner.get('uri')) or as_str(inner.get('sourceUri'))
                doc = as_str(inner.get('documentName')) or as_str(inner.get('fileSearchStore'))
                yield WireCitation(
                    api,
                    f'grounding_chunk.{kind}',
                    _key('google-chunk', cand_index, chunk_index, dict(chunk)),
                    url=url,
                    document_id=doc,
                    title=as_str(inner.get('title')),
                )


# -- xAI -------------------------------------------------------------------------------------------------------

_XAI_KINDS = ('web_citation', 'x_citation', 'collections_citation')


def _xai(api: WireApi, objs: list[Mapping[str, object]]) -> Iterator[WireCitation]:
    for obj in objs:
        outputs = list(as_maps(obj.get('outputs')))
        for citation_url in as_list(obj.get('citations')):
            if (url := as_str(citation_url)) is not None:
                yield WireCitation(api, 'search_result_url', _key('xai-url', url), url=url)
        for output in outputs:
            message = as_map(output.get('message')) or as_map(output.get('delta')) or _EMPTY
            role = message.get('role')
            for c in as_maps(message.get('citations')):
                kind = next((k for k in _XAI_KINDS if k in c), 'unknown')
                inner = as_map(c.get(kind)) or _EMPTY
                url = as_str(inner.get('url'))
                start, end = as_int(c.get('start_index')), as_int(c.get('end_index'))
                if role == 'ROLE_TOOL' or (start is None and end is None and url is not None):
                    # tool-output lists carry the same URLs as the top-level `citations` strings
                    yield WireCitation(api, 'search_result_url', _key('xai-url', url), url=url)
                    continue
                yield WireCitation(
                    api,
                    kind,
                    _key('xai-inline', c.get('id'), start, end, dict(c)),
                    url=url,
                    document_id=as_str(inner.get('file_id')),
                    start=start,
                    end=end,
                    offset_unit='char' if start is not None else None,
                )


# -- Cohere ----------------------------------------------------------------------------------------------------


def _cohere_one(api: WireApi, c: Mapping[str, object]) -> WireCitation:
    sources = list(as_maps(c.get('sources')))
    first = sources[0] if sources else _EMPTY
    doc = as_map(first.get('document')) or _EMPTY
    start, end = as_int(c.get('start')), as_int(c.get('end'))
    return WireCitation(
        api,
        (as_str(c.get('type')) or 'citation').lower(),
        _key('cohere', start, end, c.get('text'), [s.get('id') for s in sources]),
        url=as_str(doc.get('url')),
        document_id=as_str(first.get('id')),
        title=as_str(doc.get('title')),
        start=start,
        end=end,
        offset_unit='char' if start is not None else None,
    )


def _cohere(api: WireApi, objs: list[Mapping[str, object]]) -> Iterator[WireCitation]:
    for obj in objs:
        for c in as_maps(_dig(obj, 'message', 'citations')):
            yield _cohere_one(api, c)
        if obj.get('type') == 'citation-start':
            citations = _dig(obj, 'delta', 'message', 'citations')
            if (single := as_map(citations)) is not None:
                yield _cohere_one(api, single)
            for c in as_maps(citations):
                yield _cohere_one(api, c)


# -- Perplexity ------------------------------------------------------------------------------------------------


def _perplexity_agent(api: WireApi, objs: list[Mapping[str, object]]) -> Iterator[WireCitation]:
    collector = AgentStreamCollector()
    for obj in objs:
        event = cast('Mapping[str, JsonValue]', obj)
        if isinstance(obj.get('type'), str) and str(obj.get('type')).startswith(('response.', 'error')):
            collector.feed_event(event)
        else:
            collector.feed_response(event)
    for result in collector.results.values():
        yield WireCitation(
            api,
            'search_result',
            _key('pplx-result', result.id),
            url=result.url,
            title=result.title,
            document_id=str(result.id),
        )
    for rid, urls in collector.conflicts.items():  # the same id sent again with another URL: another object
        for url in urls[1:]:
            yield WireCitation(api, 'search_result', _key('pplx-result', rid, url), url=url, document_id=str(rid))
    collector.close()  # the body or stream is all there is: decide a marker at the very end of the text
    for m in collector.markers:
        for number in dict.fromkeys(m.numbers):
            result = None if number in collector.conflicts else collector.results.get(number)
            yield WireCitation(
                api,
                'numbered_marker',
                _key('pplx-marker', m.start, number),
                url=result.url if result else None,
                document_id=str(number),
                start=m.start,
                end=m.end,
                offset_unit='char',
            )


def _perplexity_sonar(api: WireApi, objs: list[Mapping[str, object]]) -> Iterator[WireCitation]:
    text = ''
    for obj in objs:
        urls = [as_str(u) for u in as_list(obj.get('citations'))]
        results = list(as_maps(obj.get('search_results')))
        for i in range(max(len(urls), len(results))):
            url = (urls[i] if i < len(urls) else None) or (as_str(results[i].get('url')) if i < len(results) else None)
            title = as_str(results[i].get('title')) if i < len(results) else None
            yield WireCitation(
                api, 'search_result', _key('sonar-result', i + 1, url), url=url, title=title, document_id=str(i + 1)
            )
        for choice in as_maps(obj.get('choices')):
            if (content := as_str(_dig(choice, 'message', 'content'))) is not None:
                text = content
            elif (piece := as_str(_dig(choice, 'delta', 'content'))) is not None:
                text += piece
    for m in extract_numbered(text):
        for number in dict.fromkeys(m.numbers):
            yield WireCitation(
                api,
                'numbered_marker',
                _key('sonar-marker', m.start, number),
                document_id=str(number),
                start=m.start,
                end=m.end,
                offset_unit='char',
            )


# -- Mistral / Groq --------------------------------------------------------------------------------------------


def _mistral(api: WireApi, objs: list[Mapping[str, object]]) -> Iterator[WireCitation]:
    for obj in objs:
        for choice in as_maps(obj.get('choices')):
            message = as_map(choice.get('message')) or as_map(choice.get('delta')) or _EMPTY
            for chunk in as_maps(message.get('content')):
                if chunk.get('type') == 'reference':
                    for ref in as_list(chunk.get('reference_ids')):
                        yield WireCitation(
                            api, 'reference', _key('mistral-ref', choice.get('index'), ref), document_id=str(ref)
                        )


def _groq(api: WireApi, objs: list[Mapping[str, object]]) -> Iterator[WireCitation]:
    for obj in objs:
        for choice in as_maps(obj.get('choices')):
            message = as_map(choice.get('message')) or as_map(choice.get('delta')) or _EMPTY
            for tool in as_maps(message.get('executed_tools')):
                for result in as_maps(_dig(tool, 'search_results', 'results')):
                    url = as_str(result.get('url'))
                    yield WireCitation(
                        api,
                        'search_result',
                        _key('groq-result', url, result.get('title')),
                        url=url,
                        title=as_str(result.get('title')),
                    )


_HANDLERS: dict[str, _Handler] = {}
_HANDLERS.update(
    {
        'anthropic-messages': _anthropic,
        'bedrock-converse': _bedrock,
        'openai-responses': _openai_responses,
        'openai-chat': _chat,
        'openrouter': _chat,
        'google-gemini': _google,
        'google-vertex': _google,
        'xai': _xai,
        'cohere': _cohere,
        'perplexity-agent': _perplexity_agent,
        'perplexity-sonar': _perplexity_sonar,
        'mistral': _mistral,
        'groq': _groq,
    }
)

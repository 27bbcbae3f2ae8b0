"""`verify_claims`: the two-step, provider-cited check, through the real `AnthropicModel` and `FunctionModel`."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from pydantic_ai import BinaryContent, Citation, ContentCitationAnchor, DocumentCitationSource, DocumentUrl
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.providers.anthropic import AnthropicProvider

from pydantic_ai_citations import Claim, verify_claims, verify_claims_sync
from pydantic_ai_citations._evidence import _read_verdict

DOCUMENTS = {
    'report-2025': 'Revenue grew 12% in 2025. Headcount stayed flat.',
    'memo-7': 'The Lyon office closes in March.',
}


def _cited_block(text: str, cited: str, index: int) -> dict[str, Any]:
    doc = list(DOCUMENTS.values())[index]
    start = doc.index(cited)
    return {
        'type': 'text',
        'text': text,
        'citations': [
            {
                'type': 'char_location',
                'cited_text': cited,
                'document_index': index,
                'document_title': None,
                'start_char_index': start,
                'end_char_index': start + len(cited),
            }
        ],
    }


def _body(content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        'id': 'msg_1',
        'type': 'message',
        'role': 'assistant',
        'model': 'claude-sonnet-4-5',
        'content': content,
        'stop_reason': 'end_turn',
        'stop_sequence': None,
        'usage': {'input_tokens': 100, 'output_tokens': 20},
    }


def _anthropic(sent: list[dict[str, Any]]) -> AnthropicModel:
    def handler(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        sent.append(body)
        claim = body['messages'][-1]['content'][-1]['text']
        if 'Revenue' in claim:
            content = [
                {'type': 'text', 'text': 'SUPPORTED\n\n'},
                _cited_block('Revenue grew by twelve percent.', 'Revenue grew 12% in 2025.', 0),
            ]
        else:
            content = [
                {'type': 'text', 'text': 'NOT SUPPORTED\n\nThe memo only says that '},
                _cited_block('the Lyon office closes in March.', 'The Lyon office closes in March.', 1),
            ]
        return httpx2.Response(200, json=_body(content))

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return AnthropicModel('claude-sonnet-4-5', provider=AnthropicProvider(api_key='test', http_client=client))


@pytest.mark.anyio
async def test_verify_claims_with_anthropic_document_citations():
    sent: list[dict[str, Any]] = []
    claims = [
        Claim(text='Revenue grew 12% in 2025.', source_ids=['report-2025']),
        'The Paris office closes in March.',
    ]
    results = await verify_claims(claims, DOCUMENTS, model=_anthropic(sent), model_settings={'max_tokens': 1024})
    assert [(r.claim.text, r.verdict, r.supported, r.cited_document_ids) for r in results] == [
        ('Revenue grew 12% in 2025.', 'supported', True, ['report-2025']),
        ('The Paris office closes in March.', 'not_supported', False, ['memo-7']),
    ]
    first = results[0].answer
    assert first.text == 'SUPPORTED\n\nRevenue grew by twelve percent.'
    assert [(first.span_text(s), s.kind) for s in first.spans] == [('Revenue grew by twelve percent.', 'content')]
    assert first.sources[0].kind == 'document'
    assert first.sources[0].excerpts == ['Revenue grew 12% in 2025.']
    assert results[0].problems == []
    # The request: text output, both documents as plain-text document blocks with citations on, each after its id.
    assert len(sent) == 2
    content = sent[0]['messages'][0]['content']
    docs = [b for b in content if b['type'] == 'document']
    assert [d['source'] for d in docs] == [
        {'data': text, 'media_type': 'text/plain', 'type': 'text'} for text in DOCUMENTS.values()
    ]
    assert all(d['citations'] == {'enabled': True} for d in docs)
    assert [b['text'] for b in content if b['type'] == 'text'][:3] == [
        'Documents (each preceded by its id):',
        'Document id: report-2025',
        'Document id: memo-7',
    ]
    assert 'SUPPORTED, NOT SUPPORTED or UNCLEAR' in json.dumps(sent[0]['system'])


def _function_model(parts_for: dict[str, list[TextPart]]):
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        assert (info.model_settings or {}).get('citations') is True
        assert info.model_request_parameters.output_mode == 'text'
        prompt = messages[-1].parts[-1]
        assert isinstance(prompt, UserPromptPart)
        claim = str(prompt.content[-1])
        return ModelResponse(parts=next(v for k, v in parts_for.items() if k in claim))

    return FunctionModel(model)


def _doc_cited(text: str, *excerpts: str, document_id: str | None = None) -> TextPart:
    source = (
        DocumentCitationSource(document_id=document_id, excerpts=list(excerpts)) if excerpts or document_id else None
    )
    cites = [Citation([source], anchor=ContentCitationAnchor(start=0, end=len(text)))] if source else None
    return TextPart(text, citations=cites)


def test_verify_claims_sync_maps_by_excerpt_and_id_and_reports_unmapped():
    model = _function_model(
        {
            'Revenue': [TextPart('**Supported.**\n'), _doc_cited('It grew.', 'Revenue   grew 12%')],
            'Headcount': [TextPart('Unclear\n'), _doc_cited('Hm.', 'nowhere to be found')],
            'Lyon': [TextPart('Supported\n'), _doc_cited('Yes.', document_id='memo-7')],
            'nothing': [TextPart('I cannot tell.')],
        }
    )
    results = verify_claims_sync(
        ['Revenue grew.', 'Headcount grew.', 'Lyon closes.', 'nothing cited'], DOCUMENTS, model=model, max_concurrency=2
    )
    assert [(r.verdict, r.cited_document_ids, [p.code for p in r.problems], r.supported) for r in results] == [
        ('supported', ['report-2025'], [], True),
        ('unclear', [], ['unmapped_provider_citation'], False),
        ('supported', ['memo-7'], [], True),
        ('unclear', [], [], False),
    ]


@pytest.mark.anyio
async def test_verify_claims_document_urls_map_by_url():
    url_doc = DocumentUrl('https://ex.com/report.pdf', identifier='report')

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = messages[-1].parts[-1]
        assert isinstance(prompt, UserPromptPart)
        assert not isinstance(prompt.content, str)
        assert url_doc in prompt.content
        from pydantic_ai import WebCitationSource

        text = 'It says so.'
        cites = [
            Citation([WebCitationSource('https://ex.com/report.pdf')], anchor=ContentCitationAnchor(start=0, end=4))
        ]
        return ModelResponse(parts=[TextPart('SUPPORTED\n' + text, citations=cites)])

    results = await verify_claims(['x'], {'report': url_doc}, model=FunctionModel(model))
    assert results[0].cited_document_ids == ['report']
    assert results[0].supported


@pytest.mark.parametrize(
    ('text', 'verdict'),
    [
        ('SUPPORTED\nbecause', 'supported'),
        ('**NOT SUPPORTED**', 'not_supported'),
        ('Unsupported: no', 'not_supported'),
        ('# Supported', 'supported'),
        ('\n\nunclear', 'unclear'),
        ('Partly', 'unclear'),
        ('', 'unclear'),
    ],
)
def test_read_verdict(text: str, verdict: str):
    assert _read_verdict(text) == verdict


@pytest.mark.anyio
async def test_verify_claims_misuse():
    model = FunctionModel(lambda m, i: ModelResponse(parts=[TextPart('x')]))
    for given in (0, '4', True):
        with pytest.raises(
            UserError, match=rf'^verify_claims: `max_concurrency` must be at least 1 \(an int\), got {given!r}'
        ):
            await verify_claims(['c'], DOCUMENTS, model=model, max_concurrency=given)  # pyright: ignore[reportArgumentType]
    with pytest.raises(UserError, match='documents=\\{\\}'):
        await verify_claims(['c'], {}, model=model)


def test_verify_claims_text_documents_given_as_bytes_map_by_excerpt_unless_undecodable():
    model = _function_model({'Revenue': [TextPart('Supported\n'), _doc_cited('It grew.', 'Revenue grew 12%')]})
    documents = {
        'scan': BinaryContent(data=b'\xff\xfe not UTF-8 Revenue grew 12%', media_type='text/plain'),
        'report': BinaryContent(data=DOCUMENTS['report-2025'].encode(), media_type='text/plain'),
    }
    [result] = verify_claims_sync('Revenue grew.', documents, model=model)
    assert (result.verdict, result.cited_document_ids, result.problems) == ('supported', ['report'], [])

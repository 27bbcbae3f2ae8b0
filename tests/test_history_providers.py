"""`CleanStaleCitations` and fingerprints through Pydantic AI's real model classes, HTTP answered by mock transports.

Every outgoing request body is captured, so the tests check what each provider API is actually sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

import httpx
import httpx2
import pytest
from pydantic_ai import (
    Agent,
    Citation,
    ContentCitationAnchor,
    MarkerCitationAnchor,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
    WebCitationSource,
)
from pydantic_ai.capabilities import Citations
from pydantic_ai.messages import ModelMessagesTypeAdapter
from pydantic_ai.models import Model
from pydantic_ai.models.fallback import FallbackModel

from pydantic_ai_citations import CleanStaleCitations, TrackCitations
from pydantic_ai_citations._edit import METADATA_KEY, fingerprint_response

Sent = list[dict[str, Any]]

ANTHROPIC_TEXT = 'K2 is 8,611 m tall.'
ANTHROPIC_RAW = {
    'type': 'web_search_result_location',
    'url': 'https://ex.com/k2',
    'title': 'K2',
    'cited_text': 'K2 ... 8,611 m',
    'encrypted_index': 'ENC',
}
OPENAI_LINK = '([ex.com](https://ex.com/everest))'
OPENAI_TEXT = f'Everest is 8,849 m tall \ue200cite\ue202turn0search0\ue201 {OPENAI_LINK}.'


def json_response(body: dict[str, Any], status: int = 200) -> Callable[[httpx2.Request], httpx2.Response]:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, json=body)

    return handler


def capture(sent: Sent, answer: Callable[[httpx2.Request], httpx2.Response]) -> httpx2.AsyncClient:
    def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(request.content))
        return answer(request)

    return httpx2.AsyncClient(transport=httpx2.MockTransport(handler), timeout=30)


def capture_httpx(sent: Sent, body: dict[str, Any]) -> httpx.AsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json=body)

    return httpx.AsyncClient(transport=httpx.MockTransport(handler), timeout=30)


# --- wire bodies ------------------------------------------------------------------------------------------------------

ANTHROPIC_OK = {
    'id': 'msg_2',
    'type': 'message',
    'role': 'assistant',
    'model': 'claude-sonnet-4-5',
    'content': [{'type': 'text', 'text': 'ok'}],
    'stop_reason': 'end_turn',
    'stop_sequence': None,
    'usage': {'input_tokens': 1, 'output_tokens': 1},
}
ANTHROPIC_CITED = {
    **ANTHROPIC_OK,
    'id': 'msg_1',
    'content': [{'type': 'text', 'text': ANTHROPIC_TEXT, 'citations': [ANTHROPIC_RAW]}],
}
RESPONSES_OK: dict[str, Any] = {
    'id': 'resp_2',
    'object': 'response',
    'created_at': 0,
    'model': 'gpt-5',
    'status': 'completed',
    'parallel_tool_calls': False,
    'tool_choice': 'auto',
    'tools': [],
    'output': [
        {
            'type': 'message',
            'id': 'msg_2',
            'role': 'assistant',
            'status': 'completed',
            'content': [{'type': 'output_text', 'text': 'ok', 'annotations': []}],
        }
    ],
    'usage': {
        'input_tokens': 1,
        'output_tokens': 1,
        'total_tokens': 2,
        'input_tokens_details': {'cached_tokens': 0},
        'output_tokens_details': {'reasoning_tokens': 0},
    },
}
_start = OPENAI_TEXT.index(OPENAI_LINK)
RESPONSES_CITED: dict[str, Any] = {
    **RESPONSES_OK,
    'id': 'resp_1',
    'output': [
        {
            'type': 'message',
            'id': 'msg_1',
            'role': 'assistant',
            'status': 'completed',
            'content': [
                {
                    'type': 'output_text',
                    'text': OPENAI_TEXT,
                    'annotations': [
                        {
                            'type': 'url_citation',
                            'url': 'https://ex.com/everest',
                            'title': 'Everest',
                            'start_index': _start,
                            'end_index': _start + len(OPENAI_LINK),
                        }
                    ],
                }
            ],
        }
    ],
}
CHAT_OK = {
    'id': 'c1',
    'object': 'chat.completion',
    'created': 0,
    'model': 'gpt-4o',
    'choices': [{'index': 0, 'message': {'role': 'assistant', 'content': 'ok'}, 'finish_reason': 'stop'}],
    'usage': {'prompt_tokens': 1, 'completion_tokens': 1, 'total_tokens': 2},
}
GOOGLE_OK = {
    'candidates': [{'content': {'role': 'model', 'parts': [{'text': 'ok'}]}, 'finishReason': 'STOP'}],
    'usageMetadata': {'promptTokenCount': 1, 'candidatesTokenCount': 1, 'totalTokenCount': 2},
    'modelVersion': 'gemini-2.5-flash',
}
COHERE_OK = {
    'id': 'x',
    'finish_reason': 'COMPLETE',
    'message': {'role': 'assistant', 'content': [{'type': 'text', 'text': 'ok'}]},
    'usage': {
        'billed_units': {'input_tokens': 1, 'output_tokens': 1},
        'tokens': {'input_tokens': 1, 'output_tokens': 1},
    },
}
BEDROCK_OK = {
    'output': {'message': {'role': 'assistant', 'content': [{'text': 'ok'}]}},
    'stopReason': 'end_turn',
    'usage': {'inputTokens': 1, 'outputTokens': 1, 'totalTokens': 2},
    'metrics': {'latencyMs': 1},
}


# --- models ---------------------------------------------------------------------------------------------------------


def anthropic_model(sent: Sent, answer: Callable[[httpx2.Request], httpx2.Response]) -> Model:
    from anthropic import AsyncAnthropic
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    client = AsyncAnthropic(api_key='test', http_client=capture(sent, answer), max_retries=0)
    return AnthropicModel('claude-sonnet-4-5', provider=AnthropicProvider(anthropic_client=client))


def responses_model(sent: Sent, answer: Callable[[httpx2.Request], httpx2.Response]) -> Model:
    from openai import AsyncOpenAI
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = AsyncOpenAI(api_key='test', http_client=capture(sent, answer), max_retries=0)
    return OpenAIResponsesModel('gpt-5', provider=OpenAIProvider(openai_client=client))


def chat_model(sent: Sent, answer: Callable[[httpx2.Request], httpx2.Response]) -> Model:
    from openai import AsyncOpenAI
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = AsyncOpenAI(api_key='test', http_client=capture(sent, answer), max_retries=0)
    return OpenAIChatModel('gpt-4o', provider=OpenAIProvider(openai_client=client))


def openrouter_model(sent: Sent, answer: Callable[[httpx2.Request], httpx2.Response]) -> Model:
    from pydantic_ai.models.openrouter import OpenRouterModel
    from pydantic_ai.providers.openrouter import OpenRouterProvider

    return OpenRouterModel(
        'openai/gpt-4o', provider=OpenRouterProvider(api_key='test', http_client=capture(sent, answer))
    )


def google_model(sent: Sent, answer: Callable[[httpx2.Request], httpx2.Response]) -> Model:
    from pydantic_ai.models.google import GoogleModel
    from pydantic_ai.providers.google import GoogleProvider

    return GoogleModel('gemini-2.5-flash', provider=GoogleProvider(api_key='test', http_client=capture(sent, answer)))


def mistral_model(sent: Sent, answer: Callable[[httpx2.Request], httpx2.Response]) -> Model:
    from pydantic_ai.models.mistral import MistralModel
    from pydantic_ai.providers.mistral import MistralProvider

    return MistralModel(
        'mistral-large-latest', provider=MistralProvider(api_key='test', http_client=capture(sent, answer))
    )


def groq_model(sent: Sent) -> Model:
    from pydantic_ai.models.groq import GroqModel
    from pydantic_ai.providers.groq import GroqProvider

    return GroqModel(
        'llama-3.3-70b-versatile', provider=GroqProvider(api_key='test', http_client=capture_httpx(sent, CHAT_OK))
    )


def cohere_model(sent: Sent) -> Model:
    from pydantic_ai.models.cohere import CohereModel
    from pydantic_ai.providers.cohere import CohereProvider

    return CohereModel(
        'command-r7b-12-2024', provider=CohereProvider(api_key='test', http_client=capture_httpx(sent, COHERE_OK))
    )


def bedrock_model(sent: Sent) -> Model:
    import boto3
    from botocore.awsrequest import AWSResponse
    from pydantic_ai.models.bedrock import BedrockConverseModel
    from pydantic_ai.providers.bedrock import BedrockProvider

    # boto3 ships without type hints (no stubs installed): its client is untyped.
    client = cast(
        Any,
        boto3.client(  # pyright: ignore[reportUnknownMemberType]
            'bedrock-runtime', region_name='us-east-1', aws_access_key_id='test', aws_secret_access_key='test'
        ),
    )

    class Raw:
        def __init__(self, data: bytes) -> None:
            self.data = data

        def stream(self, **kwargs: Any) -> Any:
            yield self.data

    def before_send(request: Any, **kwargs: Any) -> AWSResponse:
        sent.append(json.loads(request.body))
        body = json.dumps(BEDROCK_OK).encode()
        response = AWSResponse(request.url, 200, {'content-type': 'application/json'}, Raw(body))
        response._content = body  # pyright: ignore[reportAttributeAccessIssue]
        return response

    client.meta.events.register('before-send.bedrock-runtime.Converse', before_send)
    return BedrockConverseModel(
        'us.anthropic.claude-sonnet-4-5-20250929-v1:0', provider=BedrockProvider(bedrock_client=client)
    )


# --- histories --------------------------------------------------------------------------------------------------------


def cited_history() -> list[ModelMessage]:
    """A history with a cited answer from each of several providers, each fingerprinted."""
    responses = [
        ModelResponse(
            parts=[
                TextPart(
                    ANTHROPIC_TEXT,
                    provider_name='anthropic',
                    provider_details={'citations': [ANTHROPIC_RAW]},
                    citations=[
                        Citation(
                            [WebCitationSource('https://ex.com/k2', title='K2', excerpts=['K2 ... 8,611 m'])],
                            anchor=ContentCitationAnchor(start=0, end=len(ANTHROPIC_TEXT)),
                        )
                    ],
                )
            ],
            provider_name='anthropic',
            model_name='claude-sonnet-4-5',
        ),
        ModelResponse(
            parts=[
                TextPart(
                    OPENAI_TEXT,
                    id='msg_1',
                    provider_name='openai',
                    provider_details={'citations': RESPONSES_CITED['output'][0]['content'][0]['annotations']},
                    citations=[
                        Citation(
                            [WebCitationSource('https://ex.com/everest', title='Everest')],
                            anchor=MarkerCitationAnchor(start=_start, end=_start + len(OPENAI_LINK)),
                        )
                    ],
                )
            ],
            provider_name='openai',
            model_name='gpt-5',
        ),
        ModelResponse(
            parts=[
                TextPart(
                    'Kangchenjunga is third.',
                    provider_name='google-gla',
                    provider_details={'citations': [{'segment': {'start_index': 0, 'end_index': 23}}]},
                    citations=[
                        Citation(
                            [WebCitationSource('https://ex.com/k3')], anchor=ContentCitationAnchor(start=0, end=23)
                        )
                    ],
                )
            ],
            provider_name='google-gla',
            model_name='gemini-2.5-flash',
        ),
    ]
    messages: list[ModelMessage] = []
    for i, response in enumerate(responses):
        fingerprint_response(response)
        messages.extend([ModelRequest(parts=[UserPromptPart(f'question {i}')]), response])
    return messages


def fingerprint_strings(messages: list[ModelMessage]) -> set[str]:
    out = {METADATA_KEY}
    for m in messages:
        if isinstance(m, ModelResponse) and m.metadata:
            ours = m.metadata[METADATA_KEY]
            out.update(ours['fingerprints'].values())
            for prints in ours['anchors'].values():
                out.update(p[0] for p in prints if p)
    return out


def provider(factory: Callable[[Sent], Model], id: str) -> Any:
    return pytest.param(factory, id=id)


PROVIDERS: list[Any] = [
    provider(lambda sent: anthropic_model(sent, json_response(ANTHROPIC_OK)), id='anthropic'),
    provider(lambda sent: responses_model(sent, json_response(RESPONSES_OK)), id='openai-responses'),
    provider(lambda sent: chat_model(sent, json_response(CHAT_OK)), id='openai-chat'),
    provider(lambda sent: openrouter_model(sent, json_response({**CHAT_OK, 'provider': 'OpenAI'})), id='openrouter'),
    provider(lambda sent: google_model(sent, json_response(GOOGLE_OK)), id='google'),
    provider(lambda sent: mistral_model(sent, json_response(CHAT_OK)), id='mistral'),
    pytest.param(groq_model, id='groq'),
    pytest.param(cohere_model, id='cohere'),
    pytest.param(bedrock_model, id='bedrock'),
]


@pytest.mark.anyio
@pytest.mark.parametrize('make_model', PROVIDERS)
async def test_fingerprints_never_sent(make_model: Callable[[Sent], Model]) -> None:
    sent: Sent = []
    model = make_model(sent)
    history = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(cited_history()))
    agent = Agent(model, capabilities=[CleanStaleCitations(), Citations()])
    result = await agent.run('next question', message_history=history, model_settings={'max_tokens': 1024})
    assert result.output == 'ok'
    assert sent, 'the model class sent nothing'
    body = json.dumps(sent)
    needles = fingerprint_strings(history)
    assert len(needles) >= 5
    for needle in needles:
        assert needle not in body
    assert 'K2 is 8,611 m tall.' in body  # the history was sent


# --- Anthropic replay after an edit, and after none -------------------------------------------------------------------


async def anthropic_second_request(history: list[ModelMessage], capability: bool) -> dict[str, Any]:
    sent: Sent = []
    agent = Agent(
        anthropic_model(sent, json_response(ANTHROPIC_OK)),
        capabilities=[CleanStaleCitations(), Citations()] if capability else [Citations()],
    )
    await agent.run('And Everest?', message_history=history, model_settings={'max_tokens': 1024})
    return sent[-1]


@pytest.mark.anyio
async def test_anthropic_replay_unchanged_and_after_edit() -> None:
    sent: Sent = []
    agent = Agent(
        anthropic_model(sent, json_response(ANTHROPIC_CITED)), capabilities=[CleanStaleCitations(), Citations()]
    )
    first = await agent.run('How tall is K2?', model_settings={'max_tokens': 1024})
    stored = ModelMessagesTypeAdapter.dump_json(first.all_messages())

    # No edit: sent exactly as without the capability, web-search citation with its encrypted index.
    history = ModelMessagesTypeAdapter.validate_json(stored)
    with_cap = await anthropic_second_request(history, capability=True)
    without = await anthropic_second_request(ModelMessagesTypeAdapter.validate_json(stored), capability=False)
    assert with_cap == without
    block = with_cap['messages'][1]['content'][0]
    assert block['citations'][0]['encrypted_index'] == 'ENC'

    # Edited by hand in the stored JSON (no `edit_text`): the stale citation is no longer sent.
    data = json.loads(stored)
    data[1]['parts'][0]['content'] = 'K2 is 8,611 m tall, second only to Everest.'
    edited = ModelMessagesTypeAdapter.validate_json(json.dumps(data))
    sent_edited: Sent = []
    agent2 = Agent(
        anthropic_model(sent_edited, json_response(ANTHROPIC_OK)),
        capabilities=[CleanStaleCitations(), Citations(), TrackCitations()],
    )
    result = await agent2.run('And Everest?', message_history=edited, model_settings={'max_tokens': 1024})
    assistant = sent_edited[-1]['messages'][1]
    assert assistant['content'] == [{'type': 'text', 'text': 'K2 is 8,611 m tall, second only to Everest.'}]
    assert [p.code for p in TrackCitations.of(agent2).report(result).problems][:1] == ['stale_after_edit']
    repaired = result.all_messages()[1].parts[0]  # the stored history was repaired
    assert isinstance(repaired, TextPart)
    assert repaired.citations is None
    assert repaired.provider_name == 'anthropic'


@pytest.mark.anyio
async def test_openai_responses_replay_unchanged() -> None:
    history = cited_history()
    bodies: Sent = []
    for capabilities in ([CleanStaleCitations()], []):
        sent: Sent = []
        agent = Agent(responses_model(sent, json_response(RESPONSES_OK)), capabilities=capabilities)
        await agent.run(
            'next', message_history=ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(history))
        )
        bodies.append(sent[-1])
    with_cap, without = bodies
    # Anthropic's and Google's parts carry no markers: nothing to strip, so the bodies are the same.
    assert with_cap == without
    item = next(i for i in with_cap['input'] if i.get('id') == 'msg_1')
    assert item['content'][0]['annotations'][0]['url'] == 'https://ex.com/everest'
    assert '\ue200' in item['content'][0]['text']  # its own provider: sent as stored


# --- hand-off with FallbackModel ---------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize('track_first', [False, True], ids=['clean_first', 'track_first'])
async def test_fallback_handoff_cleans_per_model(track_first: bool) -> None:
    to_anthropic: Sent = []
    to_openai: Sent = []
    to_google: Sent = []
    model = FallbackModel(
        anthropic_model(
            to_anthropic, json_response({'type': 'error', 'error': {'type': 'api_error', 'message': 'boom'}}, 500)
        ),
        responses_model(to_openai, json_response({'error': {'message': 'slow down', 'type': 'rate_limit'}}, 429)),
        google_model(to_google, json_response(GOOGLE_OK)),
    )
    history = cited_history()[:4]  # Anthropic's answer, then OpenAI's (with private-use markers)
    clean = CleanStaleCitations()
    track = TrackCitations()
    capabilities = [track, Citations(), clean] if track_first else [clean, Citations(), track]
    agent = Agent(model, capabilities=capabilities)
    result = await agent.run('Which is taller?', message_history=history, model_settings={'max_tokens': 1024})
    assert result.output == 'ok'
    assert (len(to_anthropic), len(to_openai), len(to_google)) == (1, 1, 1)

    # Anthropic: its own part replayed with citations; OpenAI's markers removed.
    messages = to_anthropic[0]['messages']
    assert messages[1]['content'][0]['citations'][0]['encrypted_index'] == 'ENC'
    openai_text = json.dumps(messages[3])
    assert '\ue200' not in json.loads(openai_text)['content'][0]['text']
    assert 'Everest is 8,849 m tall' in openai_text

    # OpenAI Responses: its own item sent as Pydantic AI sends it (id, annotations, markers); Anthropic's as text.
    items = to_openai[0]['input']
    own = next(i for i in items if i.get('id') == 'msg_1')
    assert '\ue200' in own['content'][0]['text']
    assert own['content'][0]['annotations']
    assert any(i.get('role') == 'assistant' and i.get('content') == ANTHROPIC_TEXT for i in items)

    # Google: neither provider's own: markers removed, plain text.
    body = json.dumps(to_google[0], ensure_ascii=False)
    assert '\ue200' not in body
    assert 'Everest is 8,849 m tall' in body
    assert ANTHROPIC_TEXT in body

    # The stored history keeps the markers.
    stored = result.all_messages()[3].parts[0]
    assert isinstance(stored, TextPart)
    assert stored.content == OPENAI_TEXT
    problems = TrackCitations.of(agent).report(result).problems
    assert [p.code for p in problems] == ['markers_stripped_for_provider', 'markers_stripped_for_provider']


@pytest.mark.anyio
async def test_prepare_model_request_strips_for_plain_model() -> None:
    sent: Sent = []
    agent = Agent(google_model(sent, json_response(GOOGLE_OK)), capabilities=[CleanStaleCitations()])
    history = cited_history()[:4]
    result = await agent.run('q', message_history=history)
    assert '\ue200' not in json.dumps(sent[0], ensure_ascii=False)
    assert result.all_messages()[3].parts[0].content == OPENAI_TEXT  # type: ignore[union-attr]
    keep = Agent(
        google_model(sent, json_response(GOOGLE_OK)), capabilities=[CleanStaleCitations(on_provider_switch='keep')]
    )
    await keep.run('q', message_history=history)
    assert '\ue200' in json.dumps(sent[-1], ensure_ascii=False)


@pytest.mark.anyio
async def test_fingerprints_never_sent_xai(corpus: Any) -> None:
    from pydantic_ai_citations.testing import load_recording

    path = (
        corpus / 'pydantic-ai-cassettes/tests/models/cassettes/test_xai/test_xai_x_search_citations_recorded.xai.yaml'
    )
    if not path.is_file():
        pytest.skip(f'xAI recording not found at {path}')
    recording = load_recording(path)
    sent: list[Any] = []
    history = cited_history()
    agent = Agent(recording.model(sent=sent), capabilities=[CleanStaleCitations()])
    if recording.streamed:
        async with agent.run_stream('next', message_history=history, model_settings=recording.model_settings) as run:
            await run.get_output()
    else:
        await agent.run('next', message_history=history, model_settings=recording.model_settings)
    body = json.dumps(sent)
    assert 'K2 is 8,611 m tall.' in body
    for needle in fingerprint_strings(history):
        assert needle not in body


@pytest.mark.anyio
async def test_model_fallback_capability_cleans_per_attempt() -> None:
    """With the `ModelFallback` capability each candidate gets its own `prepare_model_request` attempt."""
    from pydantic_ai.capabilities import ModelFallback

    to_anthropic: Sent = []
    to_google: Sent = []
    failing = anthropic_model(
        to_anthropic, json_response({'type': 'error', 'error': {'type': 'api_error', 'message': 'boom'}}, 500)
    )
    agent = Agent(
        failing,
        capabilities=[
            ModelFallback(google_model(to_google, json_response(GOOGLE_OK))),
            CleanStaleCitations(),
            TrackCitations(),
        ],
    )
    result = await agent.run('q', message_history=cited_history()[:4], model_settings={'max_tokens': 1024})
    assert result.output == 'ok'
    assert to_anthropic[0]['messages'][1]['content'][0]['citations'][0]['encrypted_index'] == 'ENC'
    assert '\ue200' not in json.dumps(to_anthropic[0], ensure_ascii=False)
    assert '\ue200' not in json.dumps(to_google[0], ensure_ascii=False)
    problems = TrackCitations.of(agent).report(result).problems
    # Both attempts were cleaned (the requests to both providers are checked above).
    assert [p.code for p in problems] == ['markers_stripped_for_provider'] * 2

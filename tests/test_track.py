from __future__ import annotations

from collections.abc import Sequence

import pytest
from inline_snapshot import snapshot
from pydantic_ai import Agent, AgentRunResultEvent, DocumentCitationSource, WebCitationSource
from pydantic_ai.capabilities import Citations
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_citations import CitedRun, TrackCitations
from pydantic_ai_citations.testing import CITING_STYLES, CitingModel, CitingStyle, ScriptedCitation, ScriptedStreamError

pytestmark = pytest.mark.anyio

TEXT = 'K2 is 8,611 m tall. It lies on the border of Pakistan and China.'
WEB = WebCitationSource('https://example.com/k2', title='K2')
DOC = DocumentCitationSource(document_id='file-1', title='atlas.txt')


def _model(style: CitingStyle, **kw: object) -> CitingModel:
    sources = [WEB] if style in ('openai-chat', 'openrouter', 'xai') else [WEB, DOC]
    return CitingModel(TEXT, [ScriptedCitation('K2 is 8,611 m tall.', sources)], style=style, **kw)  # type: ignore[arg-type]


def _summary(run: CitedRun) -> list[tuple[str, str, bool, list[tuple[str, Sequence[str], Sequence[str]]]]]:
    return [
        (
            r.api,
            r.output_mode,
            r.streamed,
            [(p.arrival, p.anchor_kinds, p.source_kinds) for p in r.parts if p.citations],
        )
        for r in run.requests
    ]


async def test_styles_non_streamed_and_streamed():
    seen: dict[str, object] = {}
    for style in CITING_STYLES:
        track = TrackCitations()
        agent = Agent(_model(style), capabilities=[track])
        result = await agent.run('q')
        plain = track.report(result)
        async with agent.run_stream('q') as stream:
            await stream.get_output()
        streamed = track.report(stream)
        assert plain.answer.text == streamed.answer.text == result.output
        assert plain.answer.complete
        assert streamed.answer.complete
        seen[style] = (_summary(plain), _summary(streamed))
    assert seen == snapshot(
        {
            'anthropic': (
                [('anthropic-messages', 'text', False, [('response', ['content'], ['web', 'document'])])],
                [('anthropic-messages', 'text', True, [('part_end', ['content'], ['web', 'document'])])],
            ),
            'bedrock': (
                [('bedrock-converse', 'text', False, [('response', ['content'], ['web', 'document'])])],
                [('bedrock-converse', 'text', True, [('part_end', ['content'], ['web', 'document'])])],
            ),
            'openai-responses': (
                [('openai-responses', 'text', False, [('response', ['marker', 'none'], ['web', 'document'])])],
                [('openai-responses', 'text', True, [('part_end', ['marker', 'none'], ['web', 'document'])])],
            ),
            'openai-chat': (
                [('openai-chat', 'text', False, [('response', ['marker'], ['web'])])],
                [('openai-chat', 'text', True, [('response_end', ['marker'], ['web'])])],
            ),
            'openrouter': (
                [('openrouter', 'text', False, [('response', ['none'], ['web'])])],
                [('openrouter', 'text', True, [('response_end', ['none'], ['web'])])],
            ),
            'google': (
                [('google-gemini', 'text', False, [('response', ['content', 'content'], ['web', 'document'])])],
                [('google-gemini', 'text', True, [('response_end', ['content', 'content'], ['web', 'document'])])],
            ),
            'xai': (
                [('xai', 'text', False, [('response', ['marker'], ['web'])])],
                [('xai', 'text', True, [('response_end', ['marker'], ['web'])])],
            ),
        }
    )


async def test_plain_run_is_not_switched_to_streaming():
    model = _model('anthropic')
    track = TrackCitations()
    result = await Agent(model, capabilities=[track]).run('q')
    assert [r.streamed for r in track.report(result).requests] == [False]


async def test_iter_and_run_stream_events():
    track = TrackCitations()
    agent = Agent(_model('google', part_after_text=True), capabilities=[track])
    async with agent.iter('q') as run:
        async for node in run:
            if Agent.is_model_request_node(node):
                async with node.stream(run.ctx) as events:
                    async for _ in events:
                        pass
    report = track.report(run)
    assert report.answer.complete
    assert [p.arrival for p in report.requests[0].parts] == ['after_part_end']

    final = None
    async with agent.run_stream_events('q') as events:
        async for event in events:
            if isinstance(event, AgentRunResultEvent):
                final = event.result
    assert final is not None
    assert [p.arrival for p in track.report(final).requests[0].parts] == ['after_part_end']


async def test_broken_stream_is_incomplete():
    track = TrackCitations()
    agent = Agent(_model('google', break_stream_after=2, chunk_size=4), capabilities=[track])
    with pytest.raises(ScriptedStreamError):
        async with agent.run_stream('q', run_id='broken-run') as stream:
            await stream.get_output()
    report = track.report_run('broken-run')
    assert not report.answer.complete
    assert report.answer.text == 'K2 is 8,'
    assert [p.code for p in report.problems] == ['stream_incomplete']
    assert report.requests[0].complete is False


async def test_early_close_is_incomplete():
    track = TrackCitations()
    agent = Agent(_model('openai-chat', chunk_size=2), capabilities=[track])
    async with agent.run_stream('q') as stream:
        async for _ in stream.stream_text(delta=True):
            break
    report = track.report(stream)
    assert not report.answer.complete
    assert 'stream_incomplete' in [p.code for p in report.problems]


async def test_citations_requested_and_output_mode():
    track = TrackCitations()
    agent = Agent(_model('anthropic'), capabilities=[track, Citations()])
    result = await agent.run('q')
    assert track.report(result).requests[0].citations_requested is True

    def tool_output(messages: list[object], info: AgentInfo):
        from pydantic_ai import ModelResponse, ToolCallPart

        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {'x': 1})])

    track = TrackCitations()
    from pydantic import BaseModel

    class Out(BaseModel):
        x: int

    from pydantic_ai_citations._guard import CitationsDisabledWarning

    with pytest.warns(CitationsDisabledWarning, match='output mode'):
        result2 = await Agent(FunctionModel(tool_output), output_type=Out, capabilities=[track, Citations()]).run('q')  # type: ignore[arg-type]
    report = track.report(result2)
    assert [(r.output_mode, r.text_output, r.api) for r in report.requests] == [('tool', False, 'other')]
    assert [p.code for p in report.problems] == ['citations_disabled_by_output_mode']


async def test_fallback_attempts_are_recorded():
    def failing(messages: list[object], info: AgentInfo):
        from pydantic_ai.exceptions import ModelHTTPError

        raise ModelHTTPError(500, 'first', body='down')

    track = TrackCitations()
    agent = Agent(FallbackModel(FunctionModel(failing), _model('anthropic')), capabilities=[track])  # type: ignore[arg-type]
    result = await agent.run('q')
    report = track.report(result)
    assert report.answer.text == TEXT
    assert [r.api for r in report.requests][-1] == 'anthropic-messages'


class _Sink:
    def __init__(self) -> None:
        self.seen: list[object] = []

    def add_observation(self, observation: object) -> None:
        self.seen.append(observation)


async def test_matrix_sink_gets_observations():
    sink = _Sink()
    agent = Agent(_model('xai'), capabilities=[TrackCitations(matrix=sink)])
    await agent.run('q')
    async with agent.run_stream('q') as s:
        await s.get_output()
    assert [o.streamed for o in sink.seen] == [False, True]  # type: ignore[attr-defined]


def test_unknown_style_is_a_user_error():
    from pydantic_ai.exceptions import UserError

    with pytest.raises(UserError, match="Unknown CitingModel style 'nope'"):
        CitingModel('x', style='nope')  # type: ignore[arg-type]
    with pytest.raises(UserError, match='not found'):
        CitingModel('x', [ScriptedCitation('y', [WEB])])
    with pytest.raises(UserError, match='web sources only'):
        CitingModel('x', [ScriptedCitation('x', [DOC])], style='xai')


async def test_telemetry_attributes_on_the_run_span():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from pydantic_ai.models.instrumented import InstrumentationSettings

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = Agent(_model('google', part_after_text=True), capabilities=[TrackCitations()])
    agent.instrument = InstrumentationSettings(tracer_provider=provider)
    async with agent.run_stream('q') as stream:
        await stream.get_output()
    spans = {span.name.split()[0]: span for span in exporter.get_finished_spans()}
    assert not any('citations' in k for k in (spans['chat'].attributes or {}))  # on the run span only
    attributes = {k: v for k, v in (spans['invoke_agent'].attributes or {}).items() if 'citations' in k}
    assert attributes == snapshot(
        {
            'pydantic_ai_citations.citations': 2,
            'pydantic_ai_citations.anchored': 2,
            'pydantic_ai_citations.unanchored': 0,
            'pydantic_ai_citations.raw_only': 0,
            'pydantic_ai_citations.sources': 2,
            'pydantic_ai_citations.problem_codes': (),
            'pydantic_ai_citations.arrival': ('after_part_end',),
            'pydantic_ai_citations.complete': True,
        }
    )


async def test_no_span_no_attributes():
    result = await Agent(_model('anthropic'), capabilities=[TrackCitations()]).run('q')
    assert result.output == TEXT


async def test_snapshot_capture_is_a_post_run_call(tmp_path: object):
    import httpx2

    from pydantic_ai_citations.support import SnapshotStore, capture_answer

    fetched: list[str] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        fetched.append(str(request.url))
        return httpx2.Response(200, headers={'content-type': 'text/html'}, content=b'<p>K2 is 8,611 m tall.</p>')

    store = SnapshotStore(f'{tmp_path}/pages.sqlite')
    track = TrackCitations()
    result = await Agent(_model('anthropic'), capabilities=[track]).run('q')
    await capture_answer(store, track.report(result).answer, transport=httpx2.MockTransport(handler))
    assert fetched == ['https://example.com/k2']
    page = store.get('https://example.com/k2')
    assert page is not None
    assert page.status == 200


async def test_openai_private_use_markers_become_citations():
    from pydantic_ai import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    text = 'K2 is 8,611 m tall.\ue200cite\ue202turn0search0\ue201 It is remote.\ue200cite\ue202turn9x\ue201'

    def answer(messages: list[object], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(text, id='msg_1')])

    track = TrackCitations(marker_sources={'turn0search0': WEB})
    result = await Agent(FunctionModel(answer), capabilities=[track]).run('q')  # type: ignore[arg-type]
    assert result.output == 'K2 is 8,611 m tall. It is remote.'
    report = track.report(result)
    assert [(s.start, s.end, report.answer.span_text(s)) for s in report.answer.spans] == [
        (0, 19, 'K2 is 8,611 m tall.')
    ]
    assert [p.code for p in report.problems] == ['unresolved_marker']
    part = result.response.parts[0]
    assert isinstance(part, TextPart)
    assert part.id is None
    assert report.requests[0].parts[0].recovered == 1


async def test_fingerprint_survives_run_stream_history():
    """Fingerprints belong to `CleanStaleCitations`; next to `TrackCitations` they still reach `run_stream` history."""
    from pydantic_ai import ModelResponse

    from pydantic_ai_citations import CleanStaleCitations, find_stale
    from pydantic_ai_citations._edit import METADATA_KEY

    agent = Agent(_model('anthropic'), capabilities=[TrackCitations(), CleanStaleCitations()])
    async with agent.run_stream('q') as stream:
        await stream.get_output()
    messages = stream.all_messages()
    response = messages[-1]
    assert isinstance(response, ModelResponse)
    assert response.metadata is not None
    assert METADATA_KEY in response.metadata
    assert find_stale(messages) == []
    part = response.parts[0]
    part.content += ' (edited)'  # type: ignore[union-attr]
    assert [p.code for p in find_stale(messages)] == ['stale_after_edit']

"""Matrix rows per model family (Bedrock: Claude cites documents, Llama does not) and gateway rows from `--live`."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

import anyio
import pytest
from pydantic_ai import Agent, DocumentCitationSource
from pydantic_ai.exceptions import UserError

from pydantic_ai_citations import CapabilityMatrix, CitedAnswer, TrackCitations
from pydantic_ai_citations._models import family_title, model_family
from pydantic_ai_citations.cli import run
from pydantic_ai_citations.matrix import MatrixRow, build_matrix, fixture_families, load_fixture, scenarios
from pydantic_ai_citations.testing import CitingModel, ScriptedCitation

BEDROCK = 'bedrock-converse'
CLAUDE = 'us.anthropic.claude-sonnet-4-5-20250929-v1:0'
LLAMA = 'us.meta.llama3-3-70b-instruct-v1:0'


@pytest.mark.parametrize(
    ('api', 'name', 'family'),
    [
        pytest.param(BEDROCK, CLAUDE, 'anthropic', id='geo-prefixed'),
        pytest.param(BEDROCK, 'meta.llama3-3-70b-instruct-v1:0', 'meta', id='plain'),
        pytest.param(
            BEDROCK, 'arn:aws:bedrock:us-east-1:1:inference-profile/eu.amazon.nova-pro-v1:0', 'amazon', id='arn'
        ),
        pytest.param(BEDROCK, 'custom', '', id='no-vendor'),
        pytest.param('openai-chat', 'gpt-4o', '', id='single-vendor-api'),
    ],
)
def test_model_family(api: Any, name: str, family: str) -> None:
    assert model_family(api, name) == family


def test_family_titles() -> None:
    assert (family_title('meta'), family_title('via relay.test'), family_title('zzz')) == (
        'Meta Llama',
        'via relay.test',
        'zzz',
    )


def test_families_that_agree_are_one_row_and_those_that_differ_are_split() -> None:
    matrix = CapabilityMatrix()
    matrix.ensure_row('xai')  # a row with nothing measured yet is still shown
    assert matrix.rows == [MatrixRow('xai', None, 'xAI', ('',))]
    matrix = CapabilityMatrix()
    matrix.ensure_row(BEDROCK)  # an empty row of no family is not shown beside the families' rows
    matrix.add_model(BEDROCK, CLAUDE)
    matrix.add_model(BEDROCK, LLAMA)
    matrix.add(BEDROCK, 'handoff', 'plain text', 'probe', family='anthropic')
    matrix.add(BEDROCK, 'handoff', 'plain text', 'probe', family='meta')
    assert matrix.rows == [MatrixRow(BEDROCK, None, 'Bedrock Converse', ('anthropic', 'meta'))]
    assert matrix.to_dict()['rows'][0]['models'] == [CLAUDE, LLAMA]  # type: ignore[index]
    assert 'family' not in matrix.to_dict()['rows'][0]  # type: ignore[operator]

    matrix.add(BEDROCK, 'citations', 'when asked', 'probe', family='anthropic')
    matrix.add(BEDROCK, 'citations', 'no', 'probe', family='meta')
    matrix.fail(BEDROCK, 'probe', 'document', 'boom', family='meta')
    assert [(r.family, r.title) for r in matrix.rows] == [
        ('anthropic', 'Bedrock Converse (Anthropic Claude)'),
        ('meta', 'Bedrock Converse (Meta Llama)'),
    ]
    assert matrix.cell(BEDROCK, 'citations', family='meta') == 'no'
    assert matrix.cell(BEDROCK, 'citations') == 'when asked'  # all of the API's runs together
    assert [f.source for f in matrix.failures(BEDROCK, family='meta')] == ['document']
    assert matrix.failures(BEDROCK, family='anthropic') == []
    rows = cast(list[dict[str, Any]], matrix.to_dict()['rows'])
    assert [(r['family'], r['title'], r['models'], r['cells']['citations']['value']) for r in rows] == [
        ('anthropic', 'Bedrock Converse (Anthropic Claude)', [CLAUDE], 'when asked'),
        ('meta', 'Bedrock Converse (Meta Llama)', [LLAMA], 'no'),
    ]
    assert CapabilityMatrix.from_json(matrix.to_json()).to_json() == matrix.to_json()
    markdown = matrix.to_markdown()
    assert '| Bedrock Converse (Meta Llama) <sub>us.meta.llama3-3-70b-instruct-v1:0</sub> | no <sub>probe 1</sub>' in (
        markdown
    )
    assert "- Bedrock Converse (Meta Llama): probe 'document' failed: boom" in markdown
    assert 'Bedrock Converse (Meta Llama)' in matrix.to_html()
    from rich.console import Console

    console = Console(width=300, record=True)
    console.print(matrix.to_rich_table())
    table = console.export_text()
    assert 'Bedrock Converse (Meta Llama)' in table and 'us.meta.llama3-3-70b-instruct-v1:0' in table


def test_a_lone_family_is_named_and_a_gateway_is_always_its_own_row() -> None:
    matrix = CapabilityMatrix()
    matrix.add_model(BEDROCK, LLAMA)
    matrix.add('openai-chat', 'citations', 'yes', 'live')
    gateway = matrix.for_family('via relay.test')
    gateway.add('openai-chat', 'citations', 'yes', 'live')
    assert gateway.cell('openai-chat', 'citations') == 'yes'
    assert [(r.api, r.family, r.title) for r in matrix.rows] == [
        (BEDROCK, 'meta', 'Bedrock Converse (Meta Llama)'),
        ('openai-chat', None, 'OpenAI Chat Completions'),
        ('openai-chat', 'via relay.test', 'OpenAI Chat Completions (via relay.test)'),
    ]
    gateway.add('openai-chat', 'anchor', 'none', 'live')
    matrix.add('openai-chat', 'anchor', 'marker', 'live')
    rows = cast(list[dict[str, Any]], matrix.to_dict()['rows'])
    assert [r['cells']['anchor']['value'] for r in rows] == ['n/a', 'marker', 'none']  # a gateway's runs stay apart
    assert matrix.cell('openai-chat', 'anchor') == 'mixed'  # all of the API's runs
    merged = CapabilityMatrix().merge(matrix)
    assert merged.to_json() == matrix.to_json()


@pytest.mark.anyio
async def test_observed_runs_fill_one_row_per_bedrock_model_family() -> None:
    matrix = CapabilityMatrix()
    source = [DocumentCitationSource(document_id='doc-0', title='Keeper handbook')]
    claude = CitingModel(
        'Rung every 30 s.', [ScriptedCitation('Rung every 30 s.', source)], style='bedrock', model_name=CLAUDE
    )
    llama = CitingModel('Rung every 30 s.', style='bedrock', model_name=LLAMA)
    for model in (claude, llama):
        await Agent(model, capabilities=[TrackCitations(matrix=matrix)]).run('q')
    assert [(r.family, matrix.cell(BEDROCK, 'anchor', family=r.family)) for r in matrix.rows] == [
        ('anthropic', 'content'),
        ('meta', 'n/a'),
    ]


def test_bedrock_fixtures_per_model_family() -> None:
    assert fixture_families(BEDROCK) == ['meta']
    assert fixture_families('openai-chat') == []
    assert scenarios(BEDROCK, 'meta') == ['cited', 'followup']
    assert scenarios(BEDROCK, 'nope') == []
    assert load_fixture(BEDROCK, 'cited', 'meta').model_name == LLAMA
    with pytest.raises(UserError, match="No bedrock-converse/meta wire fixture named 'structured'"):
        load_fixture(BEDROCK, 'structured', 'meta')


@pytest.mark.anyio
async def test_the_llama_fixture_row_says_no_and_why() -> None:
    matrix = await build_matrix(apis=[BEDROCK])
    assert [r.title for r in matrix.rows] == ['Bedrock Converse (Anthropic Claude)', 'Bedrock Converse (Meta Llama)']
    assert matrix.cell(BEDROCK, 'citations', family='anthropic') == 'when asked'
    assert matrix.cell(BEDROCK, 'citations', family='meta') == 'no'
    assert matrix.failures(BEDROCK) == []


@pytest.mark.anyio
async def test_fixture_family_falls_back_when_an_api_has_no_fixtures(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic_ai_citations.matrix import _probes

    def nothing(*_args: object) -> list[str]:
        return []

    monkeypatch.setattr(_probes, 'scenarios', nothing)
    monkeypatch.setattr(_probes, 'fixture_families', nothing)
    matrix = CapabilityMatrix()
    await _probes.probe_api(matrix, BEDROCK)
    assert [(r.family, r.title) for r in matrix.rows] == [(None, 'Bedrock Converse')]


# --- gateways (`--live URL#MODEL`) ----------------------------------------------------------------------------------


class _Relay(BaseHTTPRequestHandler):
    """An OpenAI-compatible relay that answers every chat completion in plain text: annotations dropped."""

    def do_POST(self) -> None:
        body: dict[str, Any] = json.loads(self.rfile.read(int(self.headers['content-length'])))
        message: dict[str, object] = {'role': 'assistant', 'content': 'K2 is 8,611 m tall [1].'}
        if body.get('stream'):
            deltas: list[dict[str, object]] = [
                {'index': 0, 'delta': message, 'finish_reason': None},
                {'index': 0, 'delta': {}, 'finish_reason': 'stop'},
            ]
            chunks: list[dict[str, object]] = [
                {'id': 'c1', 'object': 'chat.completion.chunk', 'created': 1, 'model': body['model'], 'choices': [c]}
                for c in deltas
            ]
            payload = ''.join(f'data: {json.dumps(c)}\n\n' for c in chunks) + 'data: [DONE]\n\n'
            self._send('text/event-stream', payload.encode())
            return
        completion = {
            'id': 'c1',
            'object': 'chat.completion',
            'created': 1,
            'model': body['model'],
            'choices': [{'index': 0, 'message': message, 'finish_reason': 'stop'}],
            'usage': {'prompt_tokens': 5, 'completion_tokens': 7, 'total_tokens': 12},
        }
        self._send('application/json', json.dumps(completion).encode())

    def _send(self, content_type: str, data: bytes) -> None:
        self.send_response(200)
        self.send_header('content-type', content_type)
        self.send_header('content-length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def relay() -> Iterator[str]:
    server = ThreadingHTTPServer(('127.0.0.1', 0), _Relay)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f'127.0.0.1:{server.server_address[1]}'
    finally:
        server.shutdown()
        server.server_close()


def test_live_gateway_is_its_own_row(
    relay: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv('OPENAI_API_KEY', 'test-key')
    assert run(['matrix', '--no-probes', '--live', f'http://{relay}/v1#relay-model', '--format', 'json', '-q']) == 0
    [row] = json.loads(capsys.readouterr().out)['rows']
    assert (row['api'], row['family'], row['title'], row['models']) == (
        'openai-chat',
        f'via {relay}',
        f'OpenAI Chat Completions (via {relay})',
        ['relay-model'],
    )
    assert row['cells']['citations']['evidence'] == {'live': {'no': 2}}


def test_live_gateway_needs_a_model_and_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv('OPENAI_API_KEY', raising=False)
    lines: list[str] = []
    matrix = anyio.run(
        lambda: build_matrix(
            probes=False, live=['https://relay.test/v1', 'https://relay.test/v1#gpt-4o'], progress=lines.append
        )
    )
    assert [f.reason for f in matrix.unusable_inputs] == [
        'a gateway is given as URL#MODEL, e.g. https://gateway.example/v1#gpt-4o-mini',
        'skipped: OPENAI_API_KEY not set',
    ]
    assert any('set OPENAI_API_KEY' in line for line in lines)
    assert matrix.rows == []


def test_live_gateway_failure_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv('OPENAI_API_KEY', 'test-key')
    from pydantic_ai_citations.matrix import _probes

    async def refuse(*_args: object, **_kwargs: object) -> Any:
        raise ConnectionError('relay down')

    monkeypatch.setattr(_probes, '_run', refuse)
    matrix = anyio.run(lambda: build_matrix(probes=False, live=['https://relay.test/v1#gpt-4o']))
    assert [r.title for r in matrix.rows] == ['OpenAI Chat Completions (via relay.test)']
    assert [f.reason for f in matrix.failures('openai-chat', family='via relay.test')] == [
        'ConnectionError: relay down'
    ]


def test_observations_go_to_the_family_given_or_read_off_the_model() -> None:
    from pydantic_ai_citations._observation import PartArrival, RequestObservation

    def seen(model_name: str, *, complete: bool = True, output_mode: str = 'text') -> RequestObservation:
        part = PartArrival(0, 'part_end', 1, anchor_kinds=['content'], source_kinds=['document'])
        return RequestObservation(
            BEDROCK,
            'bedrock',
            model_name,
            streamed=True,
            output_mode=output_mode,
            citations_requested=True,
            complete=complete,
            parts=[part],
        )

    matrix = CapabilityMatrix()
    matrix.add_model(BEDROCK, '')  # no name, no row
    assert matrix.rows == []
    matrix.observe(seen(CLAUDE), 'live')
    matrix.observe(seen(LLAMA, complete=False), 'live')
    matrix.observe(seen(LLAMA, output_mode='tool'), 'live')
    matrix.for_family('via relay.test').observe(seen(LLAMA), 'live')
    matrix.observe(seen(LLAMA), 'recording', family='meta')
    assert [(r.family, matrix.cell(BEDROCK, 'stream', family=r.families)) for r in matrix.rows] == [
        ('anthropic', 'part_end'),
        ('meta', 'part_end'),
        ('via relay.test', 'part_end'),
    ]
    assert matrix.evidence(BEDROCK, 'citations', family='meta') == {}  # recordings decide 'yes' themselves
    assert 'an incomplete live run was left out' in matrix.to_markdown()


def test_live_provider_model_gets_its_family_row(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic_ai_citations.matrix import _probes

    monkeypatch.setenv('AWS_ACCESS_KEY_ID', 'test-key')
    monkeypatch.setenv('AWS_SECRET_ACCESS_KEY', 'test-secret')
    monkeypatch.setenv('AWS_DEFAULT_REGION', 'us-east-1')
    monkeypatch.setenv('GOOGLE_APPLICATION_CREDENTIALS', '/nonexistent.json')
    reports: list[Any] = []

    async def quiet_run(*_args: object, **_kwargs: object) -> Any:
        from pydantic_ai_citations._observation import CitedRun

        report = CitedRun('run-1', CitedAnswer.from_messages([]))
        reports.append(report)
        return report, []

    monkeypatch.setattr(_probes, '_run', quiet_run)
    lines: list[str] = []
    matrix = anyio.run(
        lambda: build_matrix(probes=False, live=[f'bedrock:{LLAMA}', 'google-vertex:x'], progress=lines.append)
    )
    assert [(r.family, r.title) for r in matrix.rows] == [('meta', 'Bedrock Converse (Meta Llama)')]
    assert len(reports) == 2  # non-streamed and streamed; no request observed, so no cell filled
    assert [(f.source, f.reason) for f in matrix.unusable_inputs] == [
        ('google-vertex:x', 'UserError: Unknown model: google-vertex:x')
    ]
    assert any(line.startswith(f'bedrock:{LLAMA} streamed in') for line in lines)

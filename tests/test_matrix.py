"""The capability matrix: default probes, recordings agreement, outputs, CLI, bad input, observed evidence."""

from __future__ import annotations

import html
import itertools
import json
import re
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from _chromium import console_errors, dump_dom, require_chromium
from inline_snapshot import snapshot
from pydantic_ai import Agent, WebCitationSource
from selectolax.lexbor import LexborHTMLParser

from pydantic_ai_citations import CapabilityMatrix, TrackCitations
from pydantic_ai_citations.cli import run
from pydantic_ai_citations.matrix import COLUMNS, FIXTURE_APIS, build_matrix
from pydantic_ai_citations.testing import CitingModel, ScriptedCitation

KEYS = [c.key for c in COLUMNS]


@pytest.fixture(scope='module')
def default_matrix() -> CapabilityMatrix:
    return anyio.run(build_matrix)


def _values(matrix: CapabilityMatrix) -> dict[str, dict[str, str]]:
    return {
        row.api + (f' ({row.family})' if row.family else ''): {
            k: matrix.cell(row.api, k, family=row.families) for k in KEYS
        }
        for row in matrix.rows
    }


def test_default_matrix_fills_every_column_for_every_row(default_matrix: CapabilityMatrix):
    assert default_matrix.apis == list(FIXTURE_APIS)
    document = default_matrix.to_dict()
    for row in cast(list[dict[str, Any]], document['rows']):
        assert row['failures'] == [], row['api']
        cells = cast(dict[str, dict[str, Any]], row['cells'])
        for key, cell in cells.items():
            notes = cast(list[str], cell['notes'])
            evidence = cast(dict[str, dict[str, int]], cell['evidence'])
            # Measured, or it says why it cannot apply.
            assert cell['value'] != 'n/a' or any(n.startswith('n/a:') for n in notes), (row['api'], key)
            if cell['value'] != 'n/a':
                assert evidence and all(sum(v.values()) >= 1 for v in evidence.values())


def test_default_matrix_values(default_matrix: CapabilityMatrix):
    assert _values(default_matrix) == snapshot(
        {
            'anthropic-messages': {
                'citations': 'when asked',
                'anchor': 'content',
                'sources': 'web+document',
                'stream': 'part_end',
                'replay': 'only when untouched',
                'handoff': 'plain text',
                'structured': 'not requested',
                'wire': '100%',
            },
            'bedrock-converse (anthropic)': {
                'citations': 'when asked',
                'anchor': 'content',
                'sources': 'document',
                'stream': 'part_end',
                'replay': 'no',
                'handoff': 'plain text',
                'structured': 'not requested',
                'wire': '100%',
            },
            'bedrock-converse (meta)': {
                'citations': 'no',
                'anchor': 'n/a',
                'sources': 'n/a',
                'stream': 'n/a',
                'replay': 'n/a',
                'handoff': 'plain text',
                'structured': 'n/a',
                'wire': 'no wire citations',
            },
            'openai-responses': {
                'citations': 'yes',
                'anchor': 'mixed',
                'sources': 'web+document',
                'stream': 'part_end',
                'replay': 'no',
                'handoff': 'raw markers in text',
                'structured': 'no switch',
                'wire': '100%',
            },
            'openai-chat': {
                'citations': 'yes',
                'anchor': 'marker',
                'sources': 'web',
                'stream': 'response_end',
                'replay': 'no',
                'handoff': 'raw markers in text',
                'structured': 'no switch',
                'wire': '100%',
            },
            'openrouter': {
                'citations': 'yes',
                'anchor': 'none',
                'sources': 'web',
                'stream': 'response_end',
                'replay': 'no',
                'handoff': 'plain text',
                'structured': 'no switch',
                'wire': '100%',
            },
            'google-gemini': {
                'citations': 'yes',
                'anchor': 'content',
                'sources': 'web+document',
                'stream': 'after_part_end / response_end',
                'replay': 'no',
                'handoff': 'plain text',
                'structured': 'no switch',
                'wire': '100%',
            },
            'google-vertex': {
                'citations': 'yes',
                'anchor': 'content',
                'sources': 'web+document',
                'stream': 'after_part_end / response_end',
                'replay': 'no',
                'handoff': 'plain text',
                'structured': 'no switch',
                'wire': '100%',
            },
            'xai': {
                'citations': 'when asked',
                'anchor': 'marker',
                'sources': 'web+document',
                'stream': 'response_end',
                'replay': 'no',
                'handoff': 'raw markers in text',
                'structured': 'not requested',
                'wire': '100%',
            },
            'perplexity-agent': {
                'citations': 'recovered',
                'anchor': 'marker',
                'sources': 'web',
                'stream': 'response_end',
                'replay': 'no',
                'handoff': 'raw markers in text',
                'structured': 'no switch',
                'wire': '100%',
            },
            'perplexity-sonar': {
                'citations': 'recovered',
                'anchor': 'marker',
                'sources': 'web',
                'stream': 'response_end',
                'replay': 'no',
                'handoff': 'raw markers in text',
                'structured': 'n/a',
                'wire': '100%',
            },
            'mistral': {
                'citations': 'no',
                'anchor': 'n/a',
                'sources': 'n/a',
                'stream': 'n/a',
                'replay': 'n/a',
                'handoff': 'plain text',
                'structured': 'no switch',
                'wire': '100%',
            },
            'cohere': {
                'citations': 'recovered',
                'anchor': 'content',
                'sources': 'document',
                'stream': 'response_end',
                'replay': 'no',
                'handoff': 'plain text',
                'structured': 'no switch',
                'wire': '100%',
            },
            'groq': {
                'citations': 'no',
                'anchor': 'n/a',
                'sources': 'n/a',
                'stream': 'n/a',
                'replay': 'n/a',
                'handoff': 'plain text',
                'structured': 'no switch',
                'wire': '100%',
            },
        }
    )


README = Path(__file__).parent.parent / 'README.md'
_GLOSS = re.compile(r'(?P<value>.+?) \((?P<gloss>.+)\)')


def _readme_excerpt() -> list[list[str]]:
    """The cells of the first table under the README's "The capability matrix" heading, header first."""
    lines = README.read_text(encoding='utf-8').split('## The capability matrix', 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('| API |'))
    table = list(itertools.takewhile(lambda line: line.startswith('|'), lines[start:]))
    rows = [[cell.strip() for cell in line.strip().strip('|').split('|')] for line in table]
    return [rows[0], *rows[2:]]  # without the `|---|` line


def test_readme_excerpt_agrees_with_the_matrix(default_matrix: CapabilityMatrix):
    """Every cell of the README's excerpt is what the matrix measures: the value, and for a combined value (`mixed`)
    the values it combines in parentheses. Rows whose cells are all the same may share a line (`Mistral, Groq`)."""
    header, *lines = _readme_excerpt()
    titles = {c.title: c.key for c in COLUMNS}
    assert header[0] == 'API' and all(title in titles for title in header[1:]), header
    keys = [titles[title] for title in header[1:]]
    rows = {row.title: row for row in default_matrix.rows}
    shown: list[str] = []
    for api, *cells in lines:
        assert len(cells) == len(keys), api
        for title in api.split(', '):
            assert title in rows, f'README row {title!r} is not a matrix row; rows: {sorted(rows)}'
            row = rows[title]
            shown.append(title)
            for key, cell in zip(keys, cells, strict=True):
                glossed = _GLOSS.fullmatch(cell)
                value = glossed['value'] if glossed else cell
                measured = default_matrix.cell(row.api, key, family=row.families)
                assert value == measured, f'README says {title} / {key} is {value!r}; the matrix measures {measured!r}'
                if glossed:
                    combined = ' / '.join(sorted(default_matrix.values(row.api, key, family=row.families)))
                    assert glossed['gloss'] == combined, f'README: {title} / {key} combines {combined!r}'
    assert len(shown) == len(set(shown)), shown


def test_wire_accounting_is_complete_on_fixtures(default_matrix: CapabilityMatrix):
    for api in default_matrix.apis:
        assert default_matrix.cell(api, 'wire') in ('100%', 'no wire citations'), api


def test_recordings_agree_with_fixtures(corpus: Path, default_matrix: CapabilityMatrix):
    recorded = anyio.run(
        lambda: build_matrix(
            probes=False,
            recordings=[corpus / 'pydantic-ai-cassettes', corpus / 'vercel-ai-fixtures'],
        )
    )
    compared = 0
    for row in recorded.rows:  # per model family where the rows are split by it (Bedrock: Claude)
        for family in row.families:
            for key in KEYS:
                from_recordings = recorded.values(row.api, key, family=family)
                from_probes = default_matrix.values(row.api, key, family=family)
                if not from_recordings or not from_probes:
                    continue
                compared += 1
                # Recordings cover fewer scenarios than the probes (or the reverse): one side's runs include the other's.
                assert from_recordings <= from_probes or from_probes <= from_recordings, (
                    row.title,
                    key,
                    from_recordings,
                    from_probes,
                )
    assert compared >= 40
    assert [r.title for r in recorded.rows if r.api == 'bedrock-converse'] == ['Bedrock Converse (Anthropic Claude)']
    # The real recordings are fully accounted for, wire citation by wire citation.
    for api in recorded.apis:
        assert recorded.cell(api, 'wire') in ('100%', 'no wire citations', 'n/a'), api
    assert recorded.failures('other') == []
    assert recorded.unusable_inputs == []


def _small() -> CapabilityMatrix:
    matrix = CapabilityMatrix()
    matrix.add_model('anthropic-messages', 'claude-sonnet-4-6')
    matrix.add('anthropic-messages', 'anchor', 'content', 'probe', runs=2)
    matrix.add('anthropic-messages', 'stream', 'part_end', 'recording')
    matrix.add('google-gemini', 'stream', 'response_end', 'probe')
    matrix.add('google-gemini', 'stream', 'after_part_end', 'observed', runs=3)
    matrix.note('google-gemini', 'stream', 'late when another part starts')
    matrix.fail('xai', 'recording', 'bad.yaml', 'truncated')
    return matrix


def test_markdown_snapshot():
    assert _small().to_markdown().split('\n\nLegend:')[0] == snapshot("""\
| API | Produces citations | Anchor | Source kinds | Stream arrival | Replayed to same provider | Another provider receives | With structured output | Wire accounting |
|---|---|---|---|---|---|---|---|---|
| Anthropic Messages <sub>claude-sonnet-4-6</sub> | n/a | content <sub>probe 2</sub> | n/a | part_end <sub>recording 1</sub> | n/a | n/a | n/a | n/a |
| Google Gemini API | n/a | n/a | n/a | after_part_end / response_end <sub>probe 1, observed 3</sub> | n/a | n/a | n/a | n/a |
| xAI | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a |

Notes:

- Google Gemini API / stream: late when another part starts
- xAI: recording 'bad.yaml' failed: truncated\
""")


def test_json_snapshot_and_round_trip():
    matrix = _small()
    data = json.loads(matrix.to_json())
    assert data['rows'][1] == snapshot(
        {
            'api': 'google-gemini',
            'title': 'Google Gemini API',
            'models': [],
            'failures': [],
            'cells': {
                'citations': {'value': 'n/a', 'evidence': {}, 'notes': []},
                'anchor': {'value': 'n/a', 'evidence': {}, 'notes': []},
                'sources': {'value': 'n/a', 'evidence': {}, 'notes': []},
                'stream': {
                    'value': 'after_part_end / response_end',
                    'evidence': {'probe': {'response_end': 1}, 'observed': {'after_part_end': 3}},
                    'notes': ['late when another part starts'],
                },
                'replay': {'value': 'n/a', 'evidence': {}, 'notes': []},
                'handoff': {'value': 'n/a', 'evidence': {}, 'notes': []},
                'structured': {'value': 'n/a', 'evidence': {}, 'notes': []},
                'wire': {'value': 'n/a', 'evidence': {}, 'notes': []},
            },
        }
    )
    again = CapabilityMatrix.from_json(matrix.to_json())
    assert again.to_json() == matrix.to_json()


def test_merge_is_order_free():
    a, b = _small(), CapabilityMatrix()
    b.add('google-gemini', 'stream', 'response_end', 'live')
    b.add('openrouter', 'anchor', 'none', 'probe')
    assert a.merge(b).to_json() == b.merge(a).to_json()


def test_unknown_column_is_an_error():
    with pytest.raises(ValueError, match="Unknown matrix column 'nope'"):
        CapabilityMatrix().add('xai', 'nope', 'x', 'probe')


HOSTILE = '<script>alert(1)</script><img src=x onerror=alert(2)>"\'&'


def _hostile() -> CapabilityMatrix:
    matrix = _small()
    matrix.add_model('xai', HOSTILE)
    matrix.add('xai', 'handoff', HOSTILE, 'observed')
    matrix.note('xai', 'wire', HOSTILE)
    matrix.fail('openrouter', 'recording', HOSTILE, HOSTILE)
    return matrix


def test_html_is_standalone_and_escapes_provider_strings():
    page = _hostile().to_html()
    tree = LexborHTMLParser(page)
    assert tree.css('script') == []
    assert tree.css('img') == []
    assert tree.css('link') == []
    for node in tree.css('*'):
        for attr, value in node.attributes.items():
            assert not attr.startswith('on')
            assert attr not in ('src', 'href') or not (value or '').startswith(('http', '//'))
    assert 'http://' not in page and 'https://' not in page
    assert '&lt;script&gt;' in page
    assert 'Legend' in page and 'after_part_end' in page


def test_markdown_escapes_table_breakers():
    text = _hostile().to_markdown()
    assert '<script>' not in text
    table = text.split('\n\n')[0]
    assert all(line.count('|') - line.count('\\|') == len(KEYS) + 2 for line in table.splitlines())


def test_html_matrix_in_headless_chromium(tmp_path: Path, default_matrix: CapabilityMatrix):
    require_chromium()
    path = tmp_path / 'matrix.html'
    path.write_text(default_matrix.to_html(), encoding='utf-8')
    assert console_errors(path) == []
    dom = dump_dom(path)
    assert 'Anthropic Messages' in dom and 'Wire accounting' in dom


def test_bad_recordings_are_rows_with_reasons(tmp_path: Path):
    truncated = tmp_path / 'truncated.yaml'
    truncated.write_text(
        'interactions:\n- request:\n    uri: https://api.anthropic.com/v1/messages\n  response: {status: '
    )
    unknown = tmp_path / 'unknown.yaml'
    unknown.write_text(
        'interactions:\n- request: {method: POST, uri: "https://llm.example.net/v9/generate", body: "{}"}\n'
        '  response: {status: {code: 200}, headers: {}, body: {string: "{}"}}\n'
    )
    rejected = tmp_path / 'rejected.yaml'
    rejected.write_text(
        'interactions:\n- request: {method: POST, uri: "https://api.openai.com/v1/responses", body: "{\\"model\\": \\"gpt-4o\\"}"}\n'
        '  response: {status: {code: 200}, headers: {content-type: [application/json]}, body: {string: "{\\"nonsense\\": 1}"}}\n'
    )
    matrix = anyio.run(
        lambda: build_matrix(probes=False, recordings=[truncated, unknown, rejected, tmp_path / 'missing.yaml'])
    )
    unusable = {Path(f.source).name: f.reason for f in matrix.unusable_inputs}
    assert set(unusable) == {'truncated.yaml', 'unknown.yaml', 'rejected.yaml', 'missing.yaml'}
    assert 'file not found' in unusable['missing.yaml']
    assert 'other' not in matrix.apis  # no row of n/a for inputs that could not be used
    assert 'rejected.yaml' in {Path(f.source).name for f in matrix.failures('openai-responses')}
    markdown = matrix.to_markdown()  # the rest of the matrix is still produced, with the reasons
    assert 'missing.yaml' in markdown and 'could not be used' in markdown and 'file not found' in markdown
    assert 'could not be used' in matrix.to_html()
    assert CapabilityMatrix.from_json(matrix.to_json()).unusable_inputs == matrix.unusable_inputs
    assert matrix.merge(CapabilityMatrix()).unusable_inputs == matrix.unusable_inputs


@pytest.mark.parametrize('fmt', ['table', 'markdown', 'json', 'html'])
def test_cli_unusable_inputs_fail_with_reasons(tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str):
    missing = tmp_path / 'missing.yaml'
    truncated = tmp_path / 'anthropic-cut.json'
    truncated.write_text('{"type": "message", "content": [')
    empty = tmp_path / 'empty'
    empty.mkdir()
    args = ['matrix', '--no-probes', '-q', '--format', fmt, '--recordings', str(missing), str(truncated), str(empty)]
    assert run([*args, '--live', 'nope:x']) == 1
    captured = capsys.readouterr()
    for text in (html.unescape(captured.out), captured.err):
        assert 'file not found' in text, fmt
        assert 'anthropic-cut.json' in text and 'not valid JSON' in text, fmt
        assert 'no recordings' in text, fmt
        assert "unknown provider 'nope'" in text, fmt
    assert captured.err.count('error: ') == 4
    out = tmp_path / f'm.{fmt}'
    assert run([*args, '-o', str(out)]) == 1  # the matrix is still written
    assert 'file not found' in out.read_text()


def test_cli_render_rejects_options_of_the_other_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from pydantic_ai_citations import CitedAnswer

    path = tmp_path / 'a.json'
    path.write_bytes(CitedAnswer('Hello.').to_json())
    assert run(['render', str(path), '--page']) == 2
    assert '--page applies to HTML only' in capsys.readouterr().err
    assert run(['render', str(path), '--format', 'html', '--style', 'footnotes']) == 2
    assert '--style applies to Markdown only' in capsys.readouterr().err
    assert run(['render', str(path), '--format', 'html', '--page']) == 0
    assert run(['render', str(path), '--style', 'footnotes']) == 0


def test_no_row_contradicts_itself(default_matrix: CapabilityMatrix):
    """A row whose wire accounting normalises or recovers citations does not say it produces none."""
    for row in cast(list[dict[str, Any]], default_matrix.to_dict()['rows']):
        wire_notes = ' '.join(row['cells']['wire']['notes'])
        normalised = sum(int(n) for n in re.findall(r'(\d+) normalised', wire_notes))
        recovered = sum(int(n) for n in re.findall(r'(\d+) recovered', wire_notes))
        produced = row['cells']['citations']['value']
        api = row['title']
        if normalised or recovered:
            assert produced != 'no', (api, produced, wire_notes)
        if recovered and not normalised:
            assert produced == 'recovered', (api, produced, wire_notes)


def test_cli_json_to_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    out = tmp_path / 'm.json'
    assert run(['matrix', '--format', 'json', '-o', str(out)]) == 0
    data = json.loads(out.read_text())
    assert data['schema'] == 'pydantic-ai-citations/capability-matrix'
    assert list(dict.fromkeys(r['api'] for r in data['rows'])) == list(FIXTURE_APIS)
    assert [r.get('family') for r in data['rows'] if r['api'] == 'bedrock-converse'] == ['anthropic', 'meta']
    assert 'probing anthropic-messages' in capsys.readouterr().err


def test_cli_default_command_and_failures(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert run(['--no-probes', '--format', 'markdown', '-q']) == 0
    assert '| API |' in capsys.readouterr().out
    assert (
        run(['matrix', '--no-probes', '--format', 'html', '-q', '-o', str(tmp_path / 'no' / 'such' / 'dir.html')]) == 1
    )
    assert 'cannot write' in capsys.readouterr().err


def test_live_without_key_is_skipped_with_a_message(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv('ANTHROPIC_API_KEY', raising=False)
    lines: list[str] = []
    matrix = anyio.run(
        lambda: build_matrix(probes=False, live=['anthropic:claude-sonnet-4-6', 'nope:x'], progress=lines.append)
    )
    assert any('set ANTHROPIC_API_KEY' in line for line in lines)
    assert [f.reason for f in matrix.unusable_inputs] == [
        'skipped: ANTHROPIC_API_KEY not set',
        snapshot(
            "unknown provider 'nope'; known: anthropic, bedrock, cohere, google-gla, google-vertex, groq, mistral, openai, openai-chat, openai-responses, openrouter, xai, or an OpenAI-compatible URL#MODEL"
        ),
    ]


@pytest.mark.anyio
async def test_observed_evidence_from_concurrent_runs():
    matrix = CapabilityMatrix()
    source = [WebCitationSource('https://example.com/k2')]

    async def one(style: str, streamed: bool) -> None:
        agent = Agent(
            CitingModel('K2 is tall. Yes.', [ScriptedCitation('K2 is tall.', source)], style=style),  # type: ignore[arg-type]
            capabilities=[TrackCitations(matrix=matrix)],
        )
        if streamed:
            async with agent.run_stream('q') as s:
                await s.get_output()
        else:
            await agent.run('q')

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            for style in ('anthropic', 'google', 'openai-chat'):
                tg.start_soon(one, style, True)
                tg.start_soon(one, style, False)
    assert matrix.evidence('anthropic-messages', 'stream') == {'observed': {'part_end': 5}}
    assert matrix.evidence('google-gemini', 'anchor') == {'observed': {'content': 10}}
    assert matrix.cell('openai-chat', 'stream') == 'response_end'


def test_cli_render(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from pydantic_ai_citations import CitedAnswer

    answer = CitedAnswer('Hello <world>.')
    path = tmp_path / 'a.json'
    path.write_bytes(answer.to_json())
    assert run(['render', str(path), '--format', 'html']) == 0
    assert '&lt;world&gt;' in capsys.readouterr().out
    assert run(['render', str(path)]) == 0
    assert 'Hello' in capsys.readouterr().out
    bad = tmp_path / 'bad.json'
    bad.write_text('{"nope": 1}')
    assert run(['render', str(bad)]) == 2
    assert 'is not a CitedAnswer' in capsys.readouterr().err
    assert run(['render', str(tmp_path / 'missing.json')]) == 2


def test_missing_sdk_is_named_with_its_extra(monkeypatch: pytest.MonkeyPatch):
    import builtins
    import sys

    real_import = builtins.__import__

    def no_anthropic(name: str, *args: object, **kwargs: object) -> object:
        if name == 'anthropic' or name.startswith('anthropic.'):
            raise ModuleNotFoundError(f"No module named '{name}'", name=name)
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, '__import__', no_anthropic)
    for module in [m for m in list(sys.modules) if m == 'anthropic' or m.startswith('anthropic.')]:
        monkeypatch.delitem(sys.modules, module)
    for module in [m for m in list(sys.modules) if m.startswith('pydantic_ai.models.anthropic')]:
        monkeypatch.delitem(sys.modules, module)
    matrix = anyio.run(lambda: build_matrix(apis=['anthropic-messages']))
    reasons = {f.reason for f in matrix.failures('anthropic-messages')}
    assert reasons == {'needs the \'anthropic\' package: pip install "pydantic-ai-citations[anthropic]" (or [all])'}


def test_strings_from_recordings_cannot_become_links_images_rows_or_terminal_markup() -> None:
    from markdown_it import MarkdownIt

    from pydantic_ai_citations.matrix import CapabilityMatrix

    matrix = CapabilityMatrix()
    for name in ('x/[click](https://evil.example/phish).yaml', 'x/![t](https://evil.example/pixel.png)', 'a\rb | c'):
        matrix.unusable('recording', name, 'bad `model`: [link](https://evil.example/) \\[link=https://evil.example]z')
    markdown = matrix.to_markdown()
    rendered = MarkdownIt('commonmark').enable('table').render(markdown)
    assert 'href="https://evil' not in rendered and '<img' not in rendered
    assert '<code>model</code>' in rendered  # the package's own code spans stay code
    assert not any(line.startswith(('b |', 'b \\|')) for line in markdown.splitlines())  # `\r` made no new line
    pytest.importorskip('rich')
    from rich.console import Console

    console = Console(record=True, width=300, force_terminal=True)
    console.print(matrix.to_rich_table())
    assert '\x1b]8;' not in console.export_text(styles=True, clear=False)  # no terminal hyperlink (OSC 8)
    assert '\\[link=https://evil.example]z' in console.export_text()  # shown as written

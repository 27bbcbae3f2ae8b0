from __future__ import annotations

import argparse
import importlib.util
import io
import json
from pathlib import Path

import pytest
from selectolax.lexbor import LexborHTMLParser

from pydantic_ai_citations import CitedAnswer, CitedSpan, SourceRef
from pydantic_ai_citations.support import PageSnapshot, SnapshotStore, audit_report_ta, audited_citation_ta
from pydantic_ai_citations.support._cli import register, run_audit

PAGES = Path(__file__).parent / 'pages'
CLAIM = 'The president made an unscheduled trip to Walter Reed hospital for a quick exam and labs.'
EVIL = '<script>alert("x")</script> | `tick` [link](javascript:alert(1))'


def answers() -> list[CitedAnswer]:
    ok = SourceRef(1, 'web', url='https://news.test/a', title=EVIL)
    dead = SourceRef(2, 'web', url='javascript:alert(1)', title='Dead <b>link</b>')
    first = CitedAnswer(
        f'{CLAIM} [1][2]',
        spans=[
            CitedSpan(len(CLAIM) + 1, len(CLAIM) + 4, 'marker', [1], message_index=1, part_index=0, citation_index=0),
            CitedSpan(len(CLAIM) + 4, len(CLAIM) + 7, 'marker', [2], message_index=1, part_index=0, citation_index=1),
        ],
        sources=[ok, dead],
        provider_name='anthropic',
        model_name=EVIL,
    )
    second = CitedAnswer('No citations here.')
    return [first, second]


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path]:
    store = SnapshotStore(tmp_path / 'snaps')
    store.put(PageSnapshot.from_text('https://news.test/a', (PAGES / 'traps.html').read_text(encoding='utf-8')))
    gone = PageSnapshot.from_text('javascript:alert(1)', '')
    store.put(
        PageSnapshot(
            url=gone.url, final_url=None, status=None, liveness='error', captured_at=gone.captured_at, reason=EVIL
        )
    )
    path = tmp_path / 'answers.json'
    path.write_text('[' + ','.join(a.to_json().decode() for a in answers()) + ']')
    return path, tmp_path / 'snaps'


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_audit(argv, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_audit_markdown(setup: tuple[Path, Path]):
    answers_path, snaps = setup
    code, out, err = run([str(answers_path), '--snapshots', str(snaps)])
    assert (code, err) == (0, '')
    assert out.startswith('# Citation support audit\n\n2 answer(s), 2 citation check(s), 1 scored.')
    assert '| supported | 1 |' in out
    assert '| unreachable | 1 |' in out
    assert '| 0.9 | 100% | ████████████████████ |' in out
    assert '## Dead links\n\n- javascript:alert(1) (error)' in out
    assert '<script>' not in out
    assert '&lt;script&gt;alert("x")&lt;/script&gt; \\| \\`tick\\`' in out
    assert 'No citations.' in out


def test_audit_html_is_standalone_and_escaped(setup: tuple[Path, Path], tmp_path: Path):
    answers_path, snaps = setup
    target = tmp_path / 'report.html'
    code, out, err = run([str(answers_path), '--snapshots', str(snaps), '--format', 'html', '-o', str(target)])
    assert (code, out, err) == (0, '', f'wrote {target}\n')
    page = target.read_text(encoding='utf-8')
    tree = LexborHTMLParser(page)
    assert tree.css('script') == []
    assert [n.tag for n in tree.css('svg polyline')] == ['polyline']
    assert len(tree.css('svg circle')) == 9
    assert all(not n.attributes.get('src') for n in tree.css('*'))
    assert tree.css('link') == []
    hrefs = [n.attributes.get('href') for n in tree.css('a')]
    assert hrefs == ['https://news.test/a']  # the javascript: source is shown as text, never linked
    assert tree.body is not None
    assert EVIL in tree.body.text()
    assert 'Dead links' in page
    assert 'javascript:alert(1) (error)' in page


def test_audit_json(setup: tuple[Path, Path]):
    answers_path, snaps = setup
    code, out, _ = run([str(answers_path), '--snapshots', str(snaps), '--format', 'json', '--threshold', '0.5'])
    assert code == 0
    report = audit_report_ta.validate_json(out)
    assert report.threshold == 0.5
    assert [c.verdict for c in report.answers[0].report.checks] == ['supported', 'unreachable']
    assert json.loads(out)['summary']['verdicts']['supported'] == 1


def test_audit_single_answer_file(setup: tuple[Path, Path], tmp_path: Path):
    _, snaps = setup
    one = tmp_path / 'one.json'
    one.write_bytes(answers()[0].to_json())
    code, out, _ = run([str(one), '--snapshots', str(snaps)])
    assert code == 0
    assert '1 answer(s)' in out


def test_audit_bad_input(setup: tuple[Path, Path], tmp_path: Path):
    answers_path, snaps = setup
    code, _, err = run([str(tmp_path / 'missing.json'), '--snapshots', str(snaps)])
    assert code == 2
    assert 'cannot read SOURCE' in err
    bad = tmp_path / 'bad.json'
    bad.write_text('{"not": "an answer"}')
    code, _, err = run([str(bad), '--snapshots', str(snaps)])
    assert code == 2
    assert f'error: {str(bad)!r}: line 1 is not a CitedAnswer' in err
    bad.write_text('not json')
    code, _, err = run([str(bad), '--snapshots', str(snaps)])
    assert code == 2
    code, _, err = run([str(answers_path), '--snapshots', str(tmp_path / 'nope')])
    assert code == 2
    assert 'does not exist' in err
    code, _, err = run([str(answers_path), '--snapshots', str(snaps), '--threshold', '7'])
    assert code == 2
    assert 'threshold must be in (0, 1], got 7.0' in err
    code, _, err = run([str(answers_path)])
    assert code == 2
    assert '--snapshots' in err


@pytest.mark.parametrize('depth', [1_000, 100_000])
@pytest.mark.parametrize('opener', ['[', '{"a":'])
def test_audit_deeply_nested_answers_file_is_a_message(
    setup: tuple[Path, Path], tmp_path: Path, depth: int, opener: str
):
    _, snaps = setup
    deep = tmp_path / 'deep.json'
    closer = ']' if opener == '[' else '}'
    deep.write_text(opener * depth + '1' + closer * depth)
    code, out, err = run([str(deep), '--snapshots', str(snaps)])
    assert code == 2
    assert out == ''
    assert 'Traceback' not in err
    assert err.startswith('error: ') and str(deep) in err


def test_register_sets_handler(setup: tuple[Path, Path]):
    answers_path, snaps = setup
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest='command'))
    args = parser.parse_args(['audit', str(answers_path), '--snapshots', str(snaps), '--format', 'json'])
    assert args.command == 'audit'
    assert callable(args.func)


@pytest.mark.anyio
async def test_example_support_check_runs():
    path = Path(__file__).resolve().parents[1] / 'examples' / 'support_check.py'
    spec = importlib.util.spec_from_file_location('support_check_example', path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lines: list[str] = await module.main()
    assert lines[0].startswith("[1] supported    score=0.89  'The school put 120 solar panels")
    assert lines[-1] == "dead links: ['https://school.test/grant (not_found)']"


def test_audit_jsonl_streams_one_line_per_citation(setup: tuple[Path, Path], tmp_path: Path):
    _, snaps = setup
    source = tmp_path / 'answers.jsonl'
    source.write_text(''.join(a.to_json().decode() + '\n' for a in answers()))
    code, out, err = run([str(source), '--snapshots', str(snaps), '--format', 'jsonl', '--partition-size', '1'])
    assert code == 0
    lines = [audited_citation_ta.validate_json(line) for line in out.splitlines()]
    assert [(x.answer, x.check and x.check.verdict) for x in lines] == [(1, 'supported'), (1, 'unreachable')]
    assert err == '2 answer(s), 2 citation check(s): supported 1, unreachable 1\n'


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_audit_progress_bar_on_a_terminal(setup: tuple[Path, Path], tmp_path: Path):
    answers_path, snaps = setup
    err = Terminal()
    target = tmp_path / 'out.md'
    code = run_audit([str(answers_path), '--snapshots', str(snaps), '-o', str(target)], stderr=err)
    assert code == 0
    assert err.getvalue().endswith(f'wrote {target}\n')
    assert target.read_text(encoding='utf-8').startswith('# Citation support audit')
    quiet = Terminal()
    assert (
        run_audit([str(answers_path), '--snapshots', str(snaps), '--no-progress', '-o', str(target)], stderr=quiet) == 0
    )
    assert quiet.getvalue() == f'wrote {target}\n'


def test_audit_a_conversation_store(setup: tuple[Path, Path], tmp_path: Path):
    _, snaps = setup
    import anyio
    from pydantic_ai import Agent, Citation, ContentCitationAnchor, ModelResponse, TextPart, WebCitationSource
    from pydantic_ai.models.function import FunctionModel

    from pydantic_ai_citations._store import SQLiteConversationStore

    def reply(*_: object) -> ModelResponse:
        citation = Citation(
            [WebCitationSource('https://news.test/a')], anchor=ContentCitationAnchor(start=0, end=len(CLAIM))
        )
        return ModelResponse(parts=[TextPart(CLAIM, citations=[citation])])

    db = tmp_path / 'conversations.db'
    store = SQLiteConversationStore(db)

    async def save() -> None:
        await store.save(await Agent(FunctionModel(reply)).run('q'))

    anyio.run(save)
    store.close()
    code, out, err = run([str(db), '--snapshots', str(snaps), '--format', 'jsonl'])
    assert (code, err) == (0, '1 answer(s), 1 citation check(s): supported 1\n')
    assert audited_citation_ta.validate_json(out).answer_id is not None


def test_audit_on_dask(setup: tuple[Path, Path]):
    from distributed import LocalCluster

    answers_path, snaps = setup
    expected = run([str(answers_path), '--snapshots', str(snaps), '--format', 'html'])
    assert run([str(answers_path), '--snapshots', str(snaps), '--format', 'html', '--workers', '1']) == expected
    cluster = LocalCluster(n_workers=1, processes=False, dashboard_address=':0')
    with cluster:
        argv = [
            str(answers_path),
            '--snapshots',
            str(snaps),
            '--format',
            'html',
            '--scheduler',
            cluster.scheduler_address,
        ]
        assert run(argv) == expected
    code, _, err = run([str(answers_path), '--snapshots', str(snaps), '--workers', '1', '--scheduler', 'tcp://x:1'])
    assert code == 2
    assert 'not allowed with argument' in err


def test_the_summary_line_names_what_was_not_checked(tmp_path: Path):
    cut = CitedAnswer('Paris is the', complete=False)
    path = tmp_path / 'answers.jsonl'
    path.write_bytes(cut.to_json() + b'\n')
    SnapshotStore(tmp_path / 'snaps')
    code, out, err = run([str(path), '--snapshots', str(tmp_path / 'snaps'), '--format', 'jsonl'])
    assert (code, out) == (0, '')
    assert err.strip() == (
        '1 answer(s), 0 citation check(s): none. 1 answer(s) did not complete (cut off): their text and citations '
        'may be missing, and only what arrived was checked.'
    )


def test_the_output_never_overwrites_what_the_audit_reads(setup: tuple[Path, Path], tmp_path: Path):
    answers_path, snaps = setup
    before = answers_path.read_bytes()
    linked = tmp_path / 'linked.json'
    linked.hardlink_to(answers_path)
    for output, what in (
        (answers_path, 'the SOURCE of answers'),
        (linked, 'the SOURCE of answers'),  # the same file under another name
        (snaps, 'the snapshot store'),
        (snaps / 'report.md', 'the snapshot store'),
    ):
        code, out, err = run([str(answers_path), '--snapshots', str(snaps), '-o', str(output)])
        assert (code, out) == (2, '')
        assert err == f'error: -o {str(output)!r} is {what}: it would be overwritten before it is read\n'
    assert answers_path.read_bytes() == before

"""The partitioned audit (`audit_answers`): exact summary merge, lazy sources, streamed output, Dask."""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic_ai import Agent, Citation, ContentCitationAnchor, ModelMessage, ModelResponse, TextPart, WebCitationSource
from pydantic_ai.conversation import Conversation
from pydantic_ai.exceptions import UserError
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_citations import CitedAnswer, CitedSpan, RawCitation, SourceRef, SQLiteConversationStore
from pydantic_ai_citations.support import (
    THRESHOLDS,
    AuditInputError,
    AuditOptions,
    CitationCheck,
    PageSnapshot,
    Passage,
    SupportSummary,
    SupportTally,
    _audit_run,
    _report,
    audit,
    audit_answers,
    audit_report_ta,
    audit_to_html,
    audit_to_markdown,
    audited_citation_ta,
    split_passages,
    summarize,
)
from pydantic_ai_citations.support._audit_run import partitions
from pydantic_ai_citations.support._report import VERDICTS, Basis, Verdict

PAGES = Path(__file__).parent / 'pages'
TRAPS = (PAGES / 'traps.html').read_text(encoding='utf-8')
ARTICLE = (PAGES / 'article.md').read_text(encoding='utf-8')
CLAIMS = (
    'The president made an unscheduled trip to Walter Reed hospital for a quick exam and labs.',
    'Doctors found the visit routine but ordered surgery and a long hospital stay with rest.',
    'The stock market fell sharply after the earnings report on Tuesday.',
)
URLS = ('https://news.test/a', 'https://news.test/md', 'https://dead.test/x', 'https://nowhere.test/y')


def pages() -> dict[str, PageSnapshot | str | bytes]:
    dead = PageSnapshot.from_text(URLS[2], '')
    return {
        URLS[0]: TRAPS,
        URLS[1]: ARTICLE,
        URLS[2]: PageSnapshot(
            url=dead.url, final_url=None, status=404, liveness='not_found', captured_at=dead.captured_at
        ),
    }


def make_answer(n: int) -> CitedAnswer:
    """Answer `n`: two or three claims, each citing one of four sources (page, Markdown page, dead, missing)."""
    claims = [CLAIMS[(n + i) % 3] for i in range(2 + n % 2)]
    text = ' '.join(claims)
    spans: list[CitedSpan] = []
    offset = 0
    for i, claim in enumerate(claims):
        number = (n + i) % 4 + 1
        spans.append(
            CitedSpan(offset, offset + len(claim), 'content', [number], message_index=0, part_index=0, citation_index=i)
        )
        offset += len(claim) + 1
    numbers = sorted({s.sources[0] for s in spans})
    sources = [
        SourceRef(k, 'web', url=URLS[k - 1], excerpts=['An excerpt about markets.'] if k == 4 and n % 3 else [])
        for k in numbers
    ]
    return CitedAnswer(text, spans=spans, sources=sources, provider_name='p', model_name=f'm{n % 2}')


CUT_OFF = CitedAnswer(
    'Paris is the capital of',
    raw_only=[
        RawCitation(
            {'type': 'container_file_citation', 'file_id': 'cfile_1'},
            "'container_file_citation' is not mapped to a citation by Pydantic AI",
            provider_name='openai',
            message_index=0,
            part_index=0,
            raw_index=0,
        )
    ],
    complete=False,
)
"""A cut-off answer whose one citation is audit-only: nothing to check, and it must still show in every output."""
ANSWERS = [make_answer(n) for n in range(23)] + [CitedAnswer('No citations here.'), CUT_OFF]


def run(source: object, fmt: str = 'jsonl', **kwargs: object) -> tuple[str, _audit_run.AuditSummary]:
    out = io.StringIO()
    result = audit_answers(source, pages(), out, format=fmt, **kwargs)  # type: ignore[arg-type]
    return out.getvalue(), result


# --- the exact merge ---------------------------------------------------------------------------------------------------

BASES: tuple[Basis, ...] = ('page', 'excerpt', 'none')


def make_check(
    verdict: Verdict, score: float | None, basis: Basis, words: int, position: float | None, url: str | None
) -> CitationCheck:
    return CitationCheck(
        source=1,
        url=url,
        document_id=None,
        title=None,
        claim='c',
        claim_kind='anchored',
        verdict=verdict,
        reason='r',
        basis=basis,
        score=score,
        passage=Passage('p', 0, position or 0.0, words) if position is not None else None,
        position=position,
        liveness='not_found' if verdict == 'unreachable' else None,
    )


checks_strategy = st.lists(
    st.builds(
        make_check,
        st.sampled_from(VERDICTS),
        st.none() | st.floats(0, 1),
        st.sampled_from(BASES),
        st.integers(1, 400),
        st.none() | st.floats(0, 1),
        st.sampled_from(['https://a.test/', 'https://b.test/', None]),
    ),
    max_size=60,
)


def reference(checks: list[CitationCheck], page_passages: dict[str, int]) -> dict[str, object]:
    """The summary's figures computed the plain way, over every check at once."""
    scores = [c.score for c in checks if c.score is not None]
    matched = [c for c in checks if c.basis == 'page' and c.passage is not None and c.position is not None]
    lengths = sorted(float(c.passage.word_count) for c in matched if c.passage)
    quartiles = None
    if len(lengths) == 1:
        quartiles = (lengths[0],) * 3
    elif lengths:
        quartiles = tuple(statistics.quantiles(lengths, n=4, method='inclusive'))
    return {
        'verdicts': {v: sum(c.verdict == v for c in checks) for v in VERDICTS},
        'curve': [sum(s >= t - 1e-9 for s in scores) / len(scores) if scores else 0.0 for t in THRESHOLDS],
        'quartiles': quartiles,
        'median': float(statistics.median(page_passages.values())) if page_passages else None,
    }


@given(
    checks_strategy, st.lists(st.integers(0, 60), max_size=6), st.dictionaries(st.text(max_size=3), st.integers(0, 99))
)
def test_merged_tallies_equal_the_summary_of_everything(
    checks: list[CitationCheck], cuts: list[int], page_passages: dict[str, int]
):
    bounds = sorted({0, len(checks), *(min(c, len(checks)) for c in cuts)})
    parts = [checks[a:b] for a, b in zip(bounds, bounds[1:], strict=False)] or [[]]
    keys = list(page_passages)
    merged = SupportTally()
    for i, part in enumerate(parts):
        share = {k: page_passages[k] for k in keys[i :: len(parts)]}
        merged = merged.merge(SupportTally.of(part, share))
    whole = summarize(checks, list(page_passages.values()))
    assert merged.summary() == whole
    tallies = [
        SupportTally.of(part, {k: page_passages[k] for k in keys[i :: len(parts)]}) for i, part in enumerate(parts)
    ]
    assert SupportTally.merge_all(tallies) == merged  # the linear fold an audit sums its partitions with
    expected = reference(checks, page_passages)
    assert whole.verdicts == expected['verdicts']
    assert [p.supported_share for p in whole.threshold_curve] == expected['curve']
    assert whole.matched_length_quartiles == expected['quartiles']
    assert whole.median_passages_per_page == expected['median']


# --- the run: partitions change nothing --------------------------------------------------------------------------------


def test_partitions_change_nothing_and_match_the_in_memory_audit():
    expected = audit(ANSWERS, pages())
    outputs = {size: run(iter(ANSWERS), partition_size=size) for size in (1, 3, 7, 500)}
    texts = {text for text, _ in outputs.values()}
    assert len(texts) == 1
    for _, result in outputs.values():
        assert result.summary == expected.summary
        assert result.answers == len(ANSWERS)
    assert outputs[3][1].partitions == 9
    lines = [audited_citation_ta.validate_json(line) for line in texts.pop().splitlines()]
    # Every citation has its line: the checks, and the cut-off answer's audit-only citation (no check), marked.
    assert [(x.answer, x.check, x.not_checked, x.answer_complete) for x in lines] == [
        *((n, check, None, True) for n, answered in enumerate(expected.answers, 1) for check in answered.report.checks),
        (len(ANSWERS), None, CUT_OFF.raw_only[0], False),
    ]
    verdicts = {x.check.verdict for x in lines if x.check is not None}
    assert verdicts >= {'supported', 'weak', 'unsupported', 'unreachable', 'no_snapshot', 'excerpt_only'}
    assert (expected.summary.incomplete_answers, expected.summary.not_checked) == (1, 1)


@pytest.mark.parametrize('size', [1, 5, 500])
def test_reports_equal_the_in_memory_ones(size: int):
    expected = audit(ANSWERS, pages())
    assert run(ANSWERS, 'markdown', partition_size=size)[0] == audit_to_markdown(expected)
    assert run(ANSWERS, 'html', partition_size=size)[0] == audit_to_html(expected)
    assert audit_report_ta.validate_json(run(ANSWERS, 'json', partition_size=size)[0]) == expected


def test_reports_say_what_was_not_checked():
    """A cut-off answer and an audit-only citation are named, never shown like a complete answer with no citation."""
    expected = audit(ANSWERS, pages())
    markdown, html = audit_to_markdown(expected), audit_to_html(expected)
    for text in (markdown, html.replace('&#x27;', "'")):
        assert '1 answer(s) did not complete (cut off)' in text
        assert '1 audit-only citation(s) (raw provider data with no position)' in text
        assert 'Incomplete: the answer did not complete' in text
        assert "Audit-only citation (not checked): 'container_file_citation' is not mapped" in text
    last = markdown[markdown.index(f'## Answer {len(ANSWERS)}') :]
    assert 'No citations checked.' in last and 'No citations.' not in last
    before = markdown[markdown.index(f'## Answer {len(ANSWERS) - 1}') : markdown.index(f'## Answer {len(ANSWERS)}')]
    assert 'No citations.' in before and 'Incomplete' not in before


def test_empty_source():
    assert run([])[0] == ''
    text, result = run([], 'json')
    assert audit_report_ta.validate_json(text).answers == []
    assert (result.answers, result.partitions, result.summary.checks) == (0, 0, 0)


def test_source_is_read_lazily():
    taken: list[int] = []

    def source() -> Iterator[CitedAnswer]:
        for n, answer in enumerate(ANSWERS):
            taken.append(n)
            yield answer

    parts = partitions(source(), 5)
    first = next(parts)
    assert (first.index, first.first, len(first.items), len(taken)) == (0, 1, 5, 5)
    taken.clear()
    written: list[int] = []

    def progress(n: int) -> None:
        written.append(len(taken))

    run(source(), partition_size=4, progress=progress)
    assert written == [4, 8, 12, 16, 20, 24, 25]  # each partition is written before the next one is read


def test_split_pages_are_renewed_after_so_many_claims(monkeypatch: pytest.MonkeyPatch):
    split: list[str] = []

    def counted(text: str, *, min_words: int) -> list[Passage]:
        split.append(text[:20])
        return split_passages(text, min_words=min_words)

    monkeypatch.setattr(_report, 'split_passages', counted)
    expected = run(ANSWERS)
    assert len(split) == 2
    monkeypatch.setattr(_audit_run, 'PAGE_USES', 3)
    split.clear()
    assert run(ANSWERS) == expected  # the index is a cache: renewing it changes nothing
    assert len(split) > 4

    renewed = _audit_run._Renewed(dict[str, int](), 2)  # pyright: ignore[reportPrivateUsage]
    renewed['a'] = 1
    assert (renewed.get('a'), renewed.get('a'), renewed.get('a'), len(renewed)) == (1, 1, None, 0)
    renewed['a'] = renewed['b'] = 2
    del renewed['a']
    assert (list(renewed), renewed.left) == (['b'], {'b': 2})
    renewed['x'] = renewed['y'] = 3
    renewed.inner.clear()  # the inner cache dropped its pages for its own limit
    renewed['c'] = 4
    assert renewed.left == {'c': 2}


def test_what_was_alive_is_frozen_out_of_the_collector_while_the_audit_runs():
    frozen: list[int] = []

    def progress(_: int) -> None:
        frozen.append(gc.get_freeze_count())

    run(ANSWERS, partition_size=5, progress=progress)
    assert min(frozen) > 0 and gc.get_freeze_count() == 0
    gc.freeze()  # the process froze objects itself (before forking, say): the audit leaves that alone
    try:
        before = gc.get_freeze_count()
        run(ANSWERS, partition_size=5)
        assert gc.get_freeze_count() == before
    finally:
        gc.unfreeze()


# --- sources -----------------------------------------------------------------------------------------------------------


def test_file_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    expected = run(ANSWERS)[0]
    lines = tmp_path / 'answers.jsonl'
    lines.write_text(''.join(a.to_json().decode() + '\n' for a in ANSWERS) + '\n')
    listed = tmp_path / 'answers.json'
    listed.write_text(' [\n' + ',\n  '.join(a.to_json().decode() for a in ANSWERS) + '\n]\n')
    monkeypatch.setattr(_audit_run, '_CHUNK', 7)  # items and lines cross every read boundary
    assert run(lines)[0] == expected
    assert run(str(listed))[0] == expected
    one = tmp_path / 'one.json'
    one.write_text(json.dumps(json.loads(ANSWERS[0].to_json()), indent=2))  # one answer over many lines
    assert run(one)[0] == run(ANSWERS[:1])[0]


def json_lines(tmp_path: Path) -> Path:
    """`ANSWERS` as JSON Lines with CRLF ends, blank and whitespace-only lines (one of them not ASCII)."""
    lines = [a.to_json().decode() for a in ANSWERS]
    lines[3:3] = ['', '  \t', '\u00a0\u2003']
    path = tmp_path / 'answers.jsonl'
    path.write_bytes(('\r\n'.join(lines) + '\r\n\r\n').encode())
    return path


@pytest.mark.parametrize('size', [1, 4, 500])
def test_json_lines_cut_into_byte_ranges_read_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int):
    path = json_lines(tmp_path)
    monkeypatch.setattr(_audit_run, '_CHUNK', 7)  # lines cross every read boundary
    read = list(partitions(path, size))
    ranged = list(partitions(path, size, ranges=True))
    assert [(p.index, p.first, p.answers) for p in ranged] == [(p.index, p.first, p.answers) for p in read]
    assert all(p.lines is not None and not p.items for p in ranged)
    assert [p.lines.read() for p in ranged if p.lines] == [p.items for p in read]
    assert read[-1].items[-1].where == 'line 28'  # line numbers count the blank lines
    assert run(path, partition_size=size)[0] == run(ANSWERS)[0]
    assert list(partitions(iter(ANSWERS), size, ranges=True)) == list(partitions(iter(ANSWERS), size))  # not a file


def test_byte_ranges_check_the_file(tmp_path: Path):
    path = json_lines(tmp_path)
    [part] = partitions(path, 500, ranges=True)
    assert part.lines is not None
    with path.open('ab') as file:
        file.write(b'\n')
    with pytest.raises(AuditInputError, match='changed while it was audited, or is another file here'):
        part.lines.read()
    path.unlink()
    with pytest.raises(AuditInputError, match='cannot be read where its answers are checked'):
        part.lines.read()
    last = tmp_path / 'last.jsonl'
    last.write_bytes(b'\n'.join(a.to_json() for a in ANSWERS[:3]))  # no line end after the last line
    ranged = [p.lines.read() for p in partitions(last, 2, ranges=True) if p.lines]
    assert ranged == [p.items for p in partitions(last, 2)] and len(ranged[1]) == 1
    bad = tmp_path / 'bad.jsonl'
    bad.write_bytes(ANSWERS[0].to_json() + b'\n\xff\xfe\n')
    with pytest.raises(AuditInputError, match='line 2 is not UTF-8 text'):
        list(partitions(bad, 500, ranges=True))
    with pytest.raises(AuditInputError, match='line 2 is not UTF-8 text'):
        run(bad)


@pytest.mark.parametrize(
    ('text', 'message'),
    [
        ('[1, 2]', 'item 1 is not a CitedAnswer'),
        ('[1, 2', 'expected "," or "]" after item 2'),
        ('[{"text": "a"} {"text": "b"}]', 'expected "," or "]" after item 1'),
        ('[{"text": "a"},', 'the JSON list is not closed'),
        ('[{"text": "a"', 'Expecting'),
        ('{"text": "a"}\n{"text": 1}\n', 'line 2 is not a CitedAnswer: text: Input should be a valid string'),
        ('not json', 'the file is not a CitedAnswer'),
        ('[' * 100_000, 'nested too deeply'),
    ],
)
def test_bad_files_name_the_answer(tmp_path: Path, text: str, message: str):
    path = tmp_path / 'bad.json'
    path.write_text(text)
    with pytest.raises(AuditInputError, match=message):
        run(path)


@pytest.mark.parametrize(
    'head',
    [
        pytest.param(b'\n', id='blank-first-line'),
        pytest.param(b'\xef\xbb\xbf', id='byte-order-mark'),
        pytest.param(b'\xef\xbb\xbf\n\r\n', id='both'),
    ],
)
def test_json_lines_files_as_editors_write_them(tmp_path: Path, head: bytes):
    """A blank first line or a UTF-8 byte-order mark: still JSON Lines (it was read as one answer, and refused)."""
    path = tmp_path / 'answers.jsonl'
    path.write_bytes(head + b'\n'.join(a.to_json() for a in ANSWERS[:3]) + b'\n')
    text, result = run(path)
    assert (result.answers, text) == (3, run(ANSWERS[:3])[0])
    assert run(path, partition_size=2, workers=None)[1].answers == 3
    ranged = [p.lines.read() for p in partitions(path, 2, ranges=True) if p.lines]
    assert [len(items) for items in ranged] == [2, 1]


def test_empty_files_are_no_answers(tmp_path: Path):
    for body in (b'', b'\n\n', b'\xef\xbb\xbf'):
        path = tmp_path / 'empty.jsonl'
        path.write_bytes(body)
        assert run(path)[1].answers == 0


def test_a_list_with_a_byte_order_mark_is_read(tmp_path: Path):
    path = tmp_path / 'answers.json'
    path.write_bytes(b'\xef\xbb\xbf[' + b','.join(a.to_json() for a in ANSWERS[:2]) + b']')
    assert run(path)[1].answers == 2


def test_bad_options():
    with pytest.raises(UserError, match='partition_size must be at least 1'):
        run(ANSWERS, partition_size=0)
    with pytest.raises(UserError, match='at most one of'):
        run(ANSWERS, workers=2, scheduler='tcp://x:1')
    with pytest.raises(UserError, match='workers must be at least 1'):
        run(ANSWERS, workers=0)
    with pytest.raises(UserError, match='threshold must be in'):
        AuditOptions(threshold=2)
    with pytest.raises(UserError, match="Unknown language 'xx'"):  # at once, not at the first citation checked
        AuditOptions(language='xx')
    with pytest.raises(UserError, match='weak_threshold must be in'):
        AuditOptions(weak_threshold=0.9)


def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    n = len(messages)
    claim = CLAIMS[n % 3]
    return ModelResponse(
        parts=[
            TextPart(
                claim,
                citations=[
                    Citation(
                        [WebCitationSource(URLS[n % 2], title='t')],
                        anchor=ContentCitationAnchor(start=0, end=len(claim)),
                    )
                ],
            )
        ],
        model_name='function-model',
    )


def test_conversation_store_source(tmp_path: Path):
    store = SQLiteConversationStore(tmp_path / 'c.db')
    agent = Agent(FunctionModel(reply))

    async def fill() -> None:
        for i in range(7):
            result = await agent.run(f'question {i}', conversation=Conversation(conversation_id=f'c{i}'))
            await store.save(result)

    anyio.run(fill)

    async def stored() -> list[tuple[str, CitedAnswer]]:
        return [(s.entry_id, s.answer) async for s in store.iter_answers(batch_size=3)]

    found = anyio.run(stored)
    assert len(found) == 7
    assert [e for e, _ in found] == sorted(e for e, _ in found)
    text, result = run(store, partition_size=2)
    lines = [audited_citation_ta.validate_json(line) for line in text.splitlines()]
    assert [(x.answer_id, x.check) for x in lines] == [
        (entry, check) for entry, answer in found for check in audit([answer], pages()).answers[0].report.checks
    ]
    assert result.summary == audit([a for _, a in found], pages()).summary
    with pytest.raises(UserError, match='batch_size'):
        anyio.run(lambda: store.iter_answers(batch_size=0).__anext__())
    store.close()


# --- Dask --------------------------------------------------------------------------------------------------------------


def audit_plugins(dask_worker: Any) -> list[str]:
    return [name for name in dask_worker.plugins if name.startswith('pydantic-ai-citations-audit')]


def test_dask_client_gives_the_same_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from distributed import Client, LocalCluster

    from pydantic_ai_citations.support import _dask

    split: list[str] = []

    def counted(text: str, *, min_words: int) -> list[Passage]:
        split.append(text[:20])
        return split_passages(text, min_words=min_words)

    monkeypatch.setattr(_report, 'split_passages', counted)
    expected = run(ANSWERS, partition_size=3)
    assert len(split) == 2  # the two readable pages, once each for the whole run
    path = json_lines(tmp_path)
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path / 'spool'))
    (tmp_path / 'spool').mkdir()
    spooled: list[str] = []
    real_remove = os.remove

    def remove(path: str) -> None:
        spooled.append(os.path.basename(path))
        real_remove(path)

    monkeypatch.setattr(os, 'remove', remove)
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=':0')
    with cluster, Client(cluster) as client:
        split.clear()
        assert run(ANSWERS, partition_size=3, client=client) == expected
        assert len(split) <= 4  # once per worker for the whole run, not once per partition (8 of them)
        # the workers of this machine wrote each partition's output to a file of the run, copied in order
        assert sorted((n for n in spooled if n.endswith('.out')), key=lambda name: int(name.split('.')[0])) == [
            f'{n}.out' for n in range(9)
        ]
        assert run(path, partition_size=3, client=client) == expected  # the workers read their byte ranges
        assert run(ANSWERS, 'html', partition_size=2, client=client)[0] == run(ANSWERS, 'html')[0]
        odd = [*ANSWERS[1:3], dataclasses.replace(ANSWERS[0], text=ANSWERS[0].text.replace('.', '\ud800.', 1))]
        for fmt in ('jsonl', 'json', 'markdown', 'html'):  # a lone surrogate: named, not a crash where it is written
            for where in ({}, {'client': client}):
                with pytest.raises(AuditInputError, match='answer 3 holds text that cannot be written as UTF-8'):
                    run(odd, fmt, partition_size=1, **where)
        with pytest.raises(AuditInputError, match='answer 2 is not a CitedAnswer'):
            run([ANSWERS[0], 'oops', *ANSWERS], partition_size=1, client=client)  # type: ignore[list-item]
        stray = [p.name for p in (tmp_path / 'spool').iterdir() if p.name.startswith('pydantic-ai-citations')]
        assert stray == []  # every run's folder is gone, a failed one's too
        left = cast(dict[str, list[str]], client.run(audit_plugins))  # pyright: ignore[reportUnknownMemberType]
        assert left == {w: [] for w in left} and len(left) == 2  # each run's pages and caches are gone
    assert gc.get_freeze_count() == 0  # the workers' plugins unfroze what they froze
    stopped = _dask._AuditRun(pages(), AuditOptions(), 'jsonl')  # pyright: ignore[reportPrivateUsage]
    with pytest.raises(RuntimeError, match='the audit was stopped on this worker'):
        stopped.check(next(partitions(ANSWERS, 1)))
    with pytest.raises(TypeError, match='client must be a distributed.Client'):
        run(ANSWERS, client=object())


def test_a_worker_spools_whole_files_and_writes_nothing_once_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from pydantic_ai_citations.support import _dask

    run = _dask._AuditRun(pages(), AuditOptions(), 'jsonl', str(tmp_path))  # pyright: ignore[reportPrivateUsage]
    run.setup(object())
    first = next(partitions(ANSWERS, 5))
    result = run.check(first)
    assert result.output == '' and result.spool == str(tmp_path / '0.out')
    assert [p.name for p in tmp_path.iterdir()] == ['0.out']  # renamed into place: no part file left
    assert (tmp_path / '0.out').read_text(encoding='utf-8') == run_partition(first)
    real = _dask.check_partition

    def stopped_meanwhile(*args: Any) -> Any:
        found = real(*args)
        run.teardown(object())  # the run ends while this partition is checked
        return found

    monkeypatch.setattr(_dask, 'check_partition', stopped_meanwhile)
    with pytest.raises(RuntimeError, match='the audit was stopped on this worker'):
        run.check(next(partitions(ANSWERS[5:], 5)))
    assert [p.name for p in tmp_path.iterdir()] == ['0.out']  # nothing written into a folder being removed
    # the driver removes the folder again when a late partition wrote into it meanwhile
    calls: list[str] = []

    def late(path: str, ignore_errors: bool = False) -> None:
        calls.append(path)
        if len(calls) > 1:
            real_rmtree(path, ignore_errors=ignore_errors)

    real_rmtree = shutil.rmtree
    monkeypatch.setattr(shutil, 'rmtree', late)
    _dask._remove(str(tmp_path))  # pyright: ignore[reportPrivateUsage]
    assert len(calls) == 2 and not tmp_path.exists()
    _dask._remove(None)  # pyright: ignore[reportPrivateUsage]


def run_partition(partition: Any) -> str:
    """The jsonl output of one partition checked in this process."""
    from pydantic_ai_citations.support._audit_run import AuditCache, check_partition

    return check_partition(partition, AuditCache(pages()), AuditOptions(), 'jsonl').output


def test_the_local_cluster_started_for_an_audit_does_not_profile_and_ticks_less():
    """No profiler (no dashboard to show it), and Dask's health ticks, memory checks and host metrics less often."""
    import dask
    from distributed import Client

    from pydantic_ai_citations.support._dask import local_cluster

    def every(server: Any) -> dict[str, float]:
        return {name: callback.callback_time for name, callback in server.periodic_callbacks.items()}

    def on_worker(dask_worker: Any) -> dict[str, float]:
        return every(dask_worker)

    config = cast(Any, dask.config)  # (its annotations are partly missing)
    default = config.get('distributed.admin.tick.interval')
    with local_cluster(1) as cluster, Client(cluster) as client:
        assert config.get('distributed.admin.tick.interval') == default  # (set while the cluster started only)
        for _ in range(2):  # as started, then restarted by its nanny (as past its memory limit): the same settings
            [worker] = cast(dict[str, dict[str, float]], client.run(on_worker)).values()  # pyright: ignore[reportUnknownMemberType]
            assert 'profile' not in worker
            assert (worker['tick'], worker['memory_monitor'], worker['monitor']) == (500, 500, 2000)
            client.restart()  # pyright: ignore[reportUnknownMemberType]
        [nanny] = [every(n) for n in cast(dict[str, Any], cluster.workers).values()]  # (in this process)
        assert (nanny['tick'], nanny['memory_monitor'], nanny['monitor']) == (500, 500, 2000)
        scheduler = every(cluster.scheduler)
        assert (scheduler['tick'], scheduler['monitor']) == (500, 2000)
        assert next(iter(cast(dict[str, int], client.nthreads()).values())) == 1  # pyright: ignore[reportUnknownMemberType]


def test_missing_dask_names_the_extra(monkeypatch: pytest.MonkeyPatch):
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> ModuleSpec | None:
        return None if name == 'distributed' else real(name, package)

    monkeypatch.setattr(importlib.util, 'find_spec', find_spec)
    monkeypatch.delitem(sys.modules, 'pydantic_ai_citations.support._dask', raising=False)
    with pytest.raises(ImportError, match=r'needs distributed: .*pydantic-ai-citations\[audit\]'):
        run(ANSWERS, workers=1)


def test_support_and_the_in_process_audit_work_without_dask():
    code = (
        'import sys\n'
        "sys.modules['dask'] = sys.modules['distributed'] = None\n"
        'import io\n'
        'from pydantic_ai_citations.support._audit_run import audit_answers\n'
        "print(audit_answers([], {}, io.StringIO()).answers, 'dask' in sys.modules and sys.modules['dask'] is not None)\n"
    )
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True)
    assert done.stdout == '0 False\n'


@pytest.mark.parametrize(
    'after', ['\n[{"text": "more"}]', '\n{"text": "a JSON line"}\n', ' junk'], ids=['list', 'json-lines', 'junk']
)
def test_content_after_a_json_list_is_refused_not_dropped(tmp_path: Path, after: str):
    """What follows a closed JSON list was dropped without a word (one answer audited of three)."""
    listed = tmp_path / 'answers.json'
    listed.write_text('[' + ANSWERS[0].to_json().decode() + ']' + after)
    with pytest.raises(AuditInputError, match=r'the JSON list of 1 item\(s\) is followed by more'):
        run(listed)
    listed.write_text('[' + ANSWERS[0].to_json().decode() + ']  \n\n')  # white space after it is fine
    assert run(listed)[0] == run(ANSWERS[:1])[0]


@pytest.mark.parametrize('chunk', [7, 64, 1 << 20])
def test_a_broken_list_item_is_reported_where_it_breaks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int):
    """A broken item was taken for one going on past the buffer, and the whole rest of the file read before the
    error: memory grew with the file. It is reported at once; items crossing read boundaries still parse."""
    monkeypatch.setattr(_audit_run, '_CHUNK', chunk)
    listed = tmp_path / 'answers.json'
    good = ',\n'.join(a.to_json().decode() for a in ANSWERS)
    listed.write_text('[' + good + '\n]')
    assert run(listed)[0] == run(ANSWERS)[0]
    listed.write_text('[{"text": "a" BROKEN},' + good + ']')
    reads: list[int] = []
    original = _audit_run._item_goes_on  # pyright: ignore[reportPrivateUsage]

    def counted(error: json.JSONDecodeError, buffer: str) -> bool:
        reads.append(len(buffer))
        return original(error, buffer)

    monkeypatch.setattr(_audit_run, '_item_goes_on', counted)
    with pytest.raises(AuditInputError, match="item 1 is not JSON: Expecting ',' delimiter"):
        run(listed)
    assert len(reads) <= 4 and max(reads) < 200 + chunk  # decided once the break is in sight, not read to the end


def test_merging_many_tallies_is_linear():
    """An audit summed its partitions with `merge`, copying the pages and dead links merged so far each time:
    20,000 one-answer partitions took 41 s."""
    import time

    def tallies(n: int) -> list[SupportTally]:
        return [
            SupportTally(checks=1, page_passages={f'p{i}': 3}, dead_links=(f'https://dead.test/{i}',)) for i in range(n)
        ]

    def cost(n: int) -> float:
        parts = tallies(n)
        start = time.process_time()
        SupportTally.merge_all(parts)
        return time.process_time() - start

    merged = SupportTally.merge_all(tallies(3))
    assert (merged.checks, len(merged.page_passages), merged.dead_links[-1]) == (3, 3, 'https://dead.test/2')
    cost(5_000)
    assert cost(80_000) <= 8 * cost(20_000) + 0.05


def test_only_the_json_report_summarizes_each_answer(monkeypatch: pytest.MonkeyPatch):
    """Per-citation lines and report sections show checks, not per-answer summaries: those are not computed for them."""
    summaries: list[int] = []
    real = SupportTally.summary

    def counted(self: SupportTally) -> SupportSummary:
        summaries.append(self.checks)
        return real(self)

    monkeypatch.setattr(SupportTally, 'summary', counted)
    expected = audit(ANSWERS, pages())
    for fmt in ('jsonl', 'markdown', 'html'):
        summaries.clear()
        assert run(ANSWERS, fmt, partition_size=3)[1].summary == expected.summary
        assert summaries == [expected.summary.checks]  # the audit's own summary, once
    summaries.clear()
    run(ANSWERS, 'json', partition_size=3)
    assert len(summaries) == len(ANSWERS) + 1

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import JsonValue
from pydantic_ai import Citation, ContentCitationAnchor, DocumentCitationSource, WebCitationSource

from pydantic_ai_citations import CitationProblem
from pydantic_ai_citations.formats.anthropic_search_results import (
    ResolvedSearchResult,
    SearchResultBlock,
    check_request,
    is_web_source,
    locate,
    reindex_after_trim,
    resolve,
    search_result_blocks,
    search_result_source,
)


def result(source: str, title: str, *texts: str, enabled: bool | None = True) -> dict[str, JsonValue]:
    block: dict[str, JsonValue] = {
        'type': 'search_result',
        'source': source,
        'title': title,
        'content': [{'type': 'text', 'text': t} for t in texts],
    }
    if enabled is not None:
        block['citations'] = {'enabled': enabled}
    return block


def location(
    index: int, source: str, cited: str, start: int = 0, end: int = 1, title: str | None = None
) -> dict[str, JsonValue]:
    return {
        'type': 'search_result_location',
        'search_result_index': index,
        'source': source,
        'title': title,
        'cited_text': cited,
        'start_block_index': start,
        'end_block_index': end,
    }


KB = 'https://kb.example/page'


def conversation() -> list[dict[str, Any]]:
    """Top-level and tool_result search results mixed, with a duplicate source."""
    return [
        {
            'role': 'user',
            'content': [
                {'type': 'text', 'text': 'Question?'},
                result('handbook.pdf', 'Handbook', 'Rule one. ', 'Rule two.'),
            ],
        },
        {
            'role': 'assistant',
            'content': [{'type': 'tool_use', 'id': 't1', 'name': 'search', 'input': {'q': 'x'}}],
        },
        {
            'role': 'user',
            'content': [
                {
                    'type': 'tool_result',
                    'tool_use_id': 't1',
                    'content': [
                        result(KB, 'KB page', 'Alpha. ', 'Beta. ', 'Gamma.'),
                        result(KB, 'KB page', 'Again.'),
                        {'type': 'text', 'text': 'not a search result, not counted'},
                    ],
                },
                result('notes-7', 'Notes', 'Note text.'),
            ],
        },
        {'role': 'assistant', 'content': 'Plain string content.'},
        {'role': 'user', 'content': 'Follow-up as a string.'},
    ]


def test_blocks_in_request_order() -> None:
    blocks = search_result_blocks(conversation())
    assert [(b.index, b.message_index, b.path, b.source, b.title) for b in blocks] == [
        (0, 0, (1,), 'handbook.pdf', 'Handbook'),
        (1, 2, (0, 0), KB, 'KB page'),
        (2, 2, (0, 1), KB, 'KB page'),
        (3, 2, (1,), 'notes-7', 'Notes'),
    ]
    assert blocks[1].texts == ('Alpha. ', 'Beta. ', 'Gamma.')
    assert all(b.citations_enabled for b in blocks)


def test_duplicate_sources_get_two_indexes() -> None:
    messages = conversation()
    first = locate(location(1, KB, 'Alpha. '), messages)
    second = locate(location(2, KB, 'Again.'), messages)
    assert isinstance(first, ResolvedSearchResult)
    assert isinstance(second, ResolvedSearchResult)
    assert (first.block.path, second.block.path) == ((0, 0), (0, 1))


def test_resolve_block_range() -> None:
    resolved = locate(location(1, KB, 'Beta. Gamma.', 1, 3, title='KB page'), conversation())
    assert isinstance(resolved, ResolvedSearchResult)
    assert (resolved.source, resolved.title, resolved.cited_text) == (KB, 'KB page', 'Beta. Gamma.')
    assert (resolved.start_block_index, resolved.end_block_index) == (1, 3)


@pytest.mark.parametrize(
    ('citation', 'code'),
    [
        pytest.param(location(4, 'x', 'y'), 'search_result_index_out_of_range', id='index-too-big'),
        pytest.param(location(-1, 'x', 'y'), 'search_result_index_out_of_range', id='negative-index'),
        pytest.param(location(0, KB, 'Rule one. '), 'conflicting_source_id', id='other-source'),
        pytest.param(
            location(0, 'handbook.pdf', 'Rule one. ', title='Other'), 'conflicting_source_id', id='other-title'
        ),
        pytest.param(location(0, 'handbook.pdf', 'x', 1, 3), 'anchor_out_of_range', id='block-range'),
        pytest.param(location(0, 'handbook.pdf', 'x', 1, 1), 'anchor_out_of_range', id='empty-range'),
        pytest.param(location(0, 'handbook.pdf', 'Rule three.'), 'quote_not_found', id='cited-text-differs'),
        pytest.param({'type': 'char_location'}, 'unreadable_raw_data', id='wrong-type'),
        pytest.param(
            {**location(0, 'handbook.pdf', 'x'), 'search_result_index': '0'}, 'unreadable_raw_data', id='string-index'
        ),
        pytest.param(
            {**location(0, 'handbook.pdf', 'x'), 'start_block_index': True}, 'unreadable_raw_data', id='bool-index'
        ),
    ],
)
def test_resolve_problems(citation: dict[str, JsonValue], code: str) -> None:
    problem = locate(citation, conversation(), citation_index=3)
    assert isinstance(problem, CitationProblem)
    assert problem.code == code
    assert problem.citation_index == 3


def test_cited_text_whitespace_tolerated() -> None:
    resolved = locate(location(0, 'handbook.pdf', 'Rule one.\nRule  two.', 0, 2), conversation())
    assert isinstance(resolved, ResolvedSearchResult)
    assert resolved.cited_text == 'Rule one. Rule two.'


def test_to_citation_web_and_document() -> None:
    messages = conversation()
    anchor = ContentCitationAnchor(start=0, end=5)
    assert resolve(location(1, KB, 'Alpha. '), messages, anchor=anchor) == Citation(
        sources=[WebCitationSource(KB, title='KB page', excerpts=['Alpha. '])], anchor=anchor
    )
    assert resolve(location(3, 'notes-7', 'Note text.'), messages) == Citation(
        sources=[DocumentCitationSource(document_id='notes-7', title='Notes', excerpts=['Note text.'])]
    )
    problem = resolve(location(9, 'x', 'y'), messages)
    assert isinstance(problem, CitationProblem)


def test_to_citation_block_without_anything() -> None:
    messages: list[dict[str, Any]] = [
        {'role': 'user', 'content': [{'type': 'search_result', 'content': [{'type': 'text', 'text': ''}]}]}
    ]
    citation: dict[str, JsonValue] = {**location(0, '', ''), 'source': None}
    problem = resolve(citation, messages)
    assert isinstance(problem, CitationProblem)
    assert problem.code == 'source_without_content'


@pytest.mark.parametrize(
    ('source', 'web'),
    [
        ('https://example.com/x', True),
        ('HTTP://example.com', True),
        ('https://', False),
        ('ftp://example.com', False),
        ('javascript:alert(1)', False),
        ('handbook.pdf', False),
        ('http://[bad', False),
    ],
)
def test_is_web_source(source: str, web: bool) -> None:
    assert is_web_source(source) is web


def test_reindex_after_trim() -> None:
    old = conversation()
    new = old[2:]  # the first exchange was trimmed
    moved = reindex_after_trim(location(3, 'notes-7', 'Note text.', title='Notes'), old, new)
    assert moved == location(2, 'notes-7', 'Note text.', title='Notes')
    assert isinstance(locate(moved, new), ResolvedSearchResult)  # type: ignore[arg-type]
    # The index from the old request must not be reused against the new one: there it is another block.
    stale = locate(location(3, 'notes-7', 'Note text.'), new)
    assert isinstance(stale, CitationProblem)
    assert stale.code == 'search_result_index_out_of_range'
    gone = reindex_after_trim(location(0, 'handbook.pdf', 'Rule one. '), old, new)
    assert isinstance(gone, CitationProblem)
    assert gone.code == 'search_result_index_out_of_range'
    assert 'no longer in the history' in gone.message


def test_reindex_after_trim_problems() -> None:
    old = conversation()
    edited = [*old[2:]]
    edited[0] = {'role': 'user', 'content': 'changed'}
    problem = reindex_after_trim(location(3, 'notes-7', 'Note text.'), old, edited)
    assert isinstance(problem, CitationProblem)
    assert 'not the old messages' in problem.message
    bad = reindex_after_trim(location(9, 'x', 'y'), old, old)
    assert isinstance(bad, CitationProblem)
    assert bad.code == 'search_result_index_out_of_range'


def test_reindex_with_identical_messages_matches_from_the_end() -> None:
    message: dict[str, JsonValue] = {'role': 'user', 'content': [result('s', 'T', 'same')]}
    old: list[dict[str, JsonValue]] = [message, {'role': 'assistant', 'content': 'ok'}, message]
    new = old[2:]
    assert reindex_after_trim(location(1, 's', 'same'), old, new) == location(0, 's', 'same')
    assert isinstance(reindex_after_trim(location(0, 's', 'same'), old, new), CitationProblem)


def test_check_request_valid() -> None:
    assert check_request(conversation()) == []


def test_check_request_problems() -> None:
    messages: list[dict[str, Any]] = [
        {'role': 'user', 'content': [result('a', 'A', 'x')]},
        {'role': 'assistant', 'content': [result('b', 'B', 'y')]},
        {'role': 'user', 'content': [result('c', 'C', 'z', enabled=None), {'type': 'search_result', 'source': 1}]},
    ]
    problems = check_request(messages)
    assert [(p.code, p.message_index, p.part_index) for p in problems] == [
        ('invalid_search_result', 1, 0),
        ('invalid_search_result', 2, 0),
        ('invalid_search_result', 2, 1),
        ('invalid_search_result', 2, 1),
    ]
    assert "'assistant' message" in problems[0].message
    assert 'enabled=False' in problems[1].message
    assert 'string source' in problems[2].message


def test_citations_disabled_everywhere_is_consistent() -> None:
    messages: list[dict[str, Any]] = [
        {'role': 'user', 'content': [result('a', 'A', 'x', enabled=False), result('b', 'B', 'y', enabled=None)]}
    ]
    assert check_request(messages) == []
    assert [b.citations_enabled for b in search_result_blocks(messages)] == [False, False]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 5)
    | st.sampled_from(['search_result', 'tool_result', 'text', 'user', 'x']),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(['type', 'role', 'content', 'source', 'title', 'text', 'citations', 'enabled']),
            children,
            max_size=5,
        )
    ),
    max_leaves=30,
)


@settings(max_examples=150)
@given(st.lists(st.dictionaries(st.sampled_from(['role', 'content']), json_values), max_size=4), json_values)
def test_never_crashes_on_arbitrary_json(messages: list[dict[str, JsonValue]], citation: JsonValue) -> None:
    blocks = search_result_blocks(messages)
    assert [b.index for b in blocks] == list(range(len(blocks)))
    check_request(messages)
    if isinstance(citation, dict):
        locate(citation, messages)
        resolve(citation, messages)
        reindex_after_trim(citation, messages, messages[1:])


def _deep(depth: int) -> object:
    value: object = 'x'
    for _ in range(depth):
        value = [value]
    return value


HOSTILE = [
    pytest.param(None, id='none'),
    pytest.param('a string', id='string'),
    pytest.param(5, id='number'),
    pytest.param({'role': 'user'}, id='dict-not-list'),
    pytest.param([None], id='none-message'),
    pytest.param(['a string message'], id='string-message'),
    pytest.param([[['x']]], id='nested-lists'),
    pytest.param([{'role': 'user', 'content': None}], id='none-content'),
    pytest.param([{'role': 'user', 'content': [None, 'x', 3, {'type': None}]}], id='junk-blocks'),
    pytest.param(
        [
            {
                'role': 'user',
                'content': [{'type': 'search_result', 'source': 3, 'title': list[str](), 'content': _deep(50_000)}],
            }
        ],
        id='deep-content',
    ),
    pytest.param([_deep(50_000)], id='deep-message'),
]


@pytest.mark.parametrize('messages', HOSTILE)
def test_hostile_messages_are_problems_not_crashes(messages: Any) -> None:
    blocks = search_result_blocks(messages)
    assert all(isinstance(b, SearchResultBlock) for b in blocks)
    problems = check_request(messages)
    assert all(isinstance(p, CitationProblem) for p in problems)
    citation = {'type': 'search_result_location', 'search_result_index': 0, 'start_block_index': 0,
                'end_block_index': 1}  # fmt: skip
    for result in (
        locate(citation, messages),
        resolve(citation, messages),
        reindex_after_trim(citation, messages, messages),
    ):
        assert isinstance(result, CitationProblem | dict | Citation | ResolvedSearchResult)


def test_non_message_entries_are_reported() -> None:
    # Deliberately not messages: the entries are what a hostile caller could pass.
    problems = check_request([None, {'role': 'user', 'content': 'hi'}, 'x'])  # pyright: ignore[reportArgumentType]
    assert [(p.code, p.message_index) for p in problems] == [('unreadable_raw_data', 0), ('unreadable_raw_data', 2)]
    (problem,) = check_request(None)  # pyright: ignore[reportArgumentType]
    assert problem.code == 'unreadable_raw_data'


@pytest.mark.parametrize('citation', [None, 'x', 5, [], _deep(50_000)])
def test_hostile_citations_are_problems(citation: Any) -> None:
    result = locate(citation, [])
    assert isinstance(result, CitationProblem)
    assert result.code == 'unreadable_raw_data'
    assert result.detail is not None and len(result.detail) <= 200


@pytest.mark.parametrize('value', [None, 5, [], {}, _deep(10)])
def test_source_helpers_take_wrong_types_as_absent(value: Any) -> None:
    assert is_web_source(value) is False
    assert search_result_source(value, value, value) is None

"""The assertion helpers of `pydantic_ai_citations.testing`: each rule broken by a hand-written answer, and kept."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
from inline_snapshot import snapshot
from pydantic import BaseModel
from pydantic_ai import (
    Agent,
    Citation,
    ContentCitationAnchor,
    DocumentCitationSource,
    MarkerCitationAnchor,
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    WebCitationSource,
)
from pydantic_ai.exceptions import UserError
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_citations import CitedAnswer, StripCitationMarkup, TrackCitations
from pydantic_ai_citations.formats.wire import count_wire_citations
from pydantic_ai_citations.testing import (
    CitingModel,
    CitingStyle,
    ScriptedCitation,
    assert_cites,
    assert_clean_output,
    assert_complete,
    assert_no_lost_citations,
    assert_no_raw_markup,
    load_recording,
)

pytestmark = pytest.mark.anyio

TEXT = 'K2 is 8,611 m tall. It lies on the China–Pakistan border.'
WIKI = WebCitationSource('https://en.wikipedia.org/wiki/K2', title='K2 - Wikipedia')
BORDER = WebCitationSource('https://example.com/border', title='Border')
CITES = [ScriptedCitation('K2 is 8,611 m tall.', [WIKI]), ScriptedCitation('China–Pakistan border', [BORDER])]
MARKER = '\ue200cite\ue202turn0search0\ue201'


async def run(style: CitingStyle, citations: list[ScriptedCitation] = CITES) -> Any:
    return await Agent(CitingModel(TEXT, citations, style=style)).run('How tall is K2?')


def message(excinfo: pytest.ExceptionInfo[AssertionError]) -> str:
    return str(excinfo.value)


def answer_of(text: str, *citations: Citation, state: Any = 'complete') -> CitedAnswer:
    return CitedAnswer.from_messages([ModelResponse(parts=[TextPart(text, citations=list(citations))], state=state)])


def raw_text_agent(text: str) -> Agent[None, str]:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(text)])

    return Agent(FunctionModel(answer))


# --- assert_cites ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize('style', ['anthropic', 'bedrock', 'google', 'openai-responses', 'openai-chat', 'xai'])
@pytest.mark.parametrize('quote', [None, '8,611 m', 'K2 is 8,611 m tall.', 'K2 is 8,611 m tall. It'])
async def test_cites_passes_for_every_anchor_kind(style: CitingStyle, quote: str | None):
    result = await run(style)
    if quote == 'K2 is 8,611 m tall. It' and style in ('openai-responses', 'openai-chat', 'xai'):
        quote = 'K2 is 8,611 m tall.'  # a marker cites the sentence it closes: never the next one's words
    assert_cites(result, WIKI.url, quote=quote)
    assert_cites(CitedAnswer.from_result(result), BORDER.url, quote='China–Pakistan')


async def test_cites_a_marker_inside_the_quote_but_not_words_after_it():
    result = await run('xai')
    assert_cites(result, WIKI.url, quote='tall. [[1]](https://en.wikipedia.org/wiki/K2) It')
    with pytest.raises(AssertionError, match="is cited, but not for 'It lies'"):
        assert_cites(result, WIKI.url, quote='It lies')


async def test_cites_a_source_card_without_a_quote():
    assert_cites(await run('openrouter'), WIKI.url)


async def test_cites_fails_for_a_url_not_cited():
    with pytest.raises(AssertionError) as excinfo:
        assert_cites(await run('anthropic'), 'https://example.com/k2')
    assert message(excinfo) == snapshot("""\
The answer does not cite 'https://example.com/k2'.
Expected: a span or a source card citing 'https://example.com/k2'; cited: 'https://en.wikipedia.org/wiki/K2', 'https://example.com/border'.
The answer (as render_markdown(answer, 'footnotes') shows it):
    K2 is 8,611 m tall.[^1] It lies on the China–Pakistan border[^2].

    [^1]: [K2 - Wikipedia](https://en.wikipedia.org/wiki/K2) (en.wikipedia.org) — “K2 is 8,611 m tall.”
    [^2]: [Border](https://example.com/border) (example.com) — “China–Pakistan border”\
""")


async def test_cites_fails_when_the_url_is_cited_for_other_words():
    with pytest.raises(AssertionError) as excinfo:
        assert_cites(await run('anthropic'), BORDER.url, quote='8,611 m')
    assert message(excinfo) == snapshot("""\
'https://example.com/border' is cited, but not for '8,611 m'.
Expected: a citation of 'https://example.com/border' on '8,611 m'; it is cited on: 'China–Pakistan border' at 35-56.
The answer (as render_markdown(answer, 'footnotes') shows it):
    K2 is 8,611 m tall.[^1] It lies on the China–Pakistan border[^2].

    [^1]: [K2 - Wikipedia](https://en.wikipedia.org/wiki/K2) (en.wikipedia.org) — “K2 is 8,611 m tall.”
    [^2]: [Border](https://example.com/border) (example.com) — “China–Pakistan border”\
""")
    with pytest.raises(AssertionError, match="is cited, but not for 'tall'"):
        assert_cites(await run('xai'), BORDER.url, quote='tall')  # the marker closes the next sentence


async def test_cites_fails_when_the_url_is_only_on_a_source_card():
    with pytest.raises(AssertionError) as excinfo:
        assert_cites(await run('openrouter'), WIKI.url, quote='8,611 m')
    assert message(excinfo) == snapshot("""\
'https://en.wikipedia.org/wiki/K2' is cited, but not for '8,611 m'.
Expected: a citation of 'https://en.wikipedia.org/wiki/K2' on '8,611 m'; it is cited only on a source card (no position in the text).
The answer (as render_markdown(answer, 'footnotes') shows it):
    K2 is 8,611 m tall. It lies on the China–Pakistan border.

    **Sources used**

    - \\[1\\] [K2 - Wikipedia](https://en.wikipedia.org/wiki/K2) (en.wikipedia.org) — “K2 is 8,611 m tall.”
    - \\[2\\] [Border](https://example.com/border) (example.com) — “China–Pakistan border”\
""")


async def test_cites_fails_when_the_quote_is_not_in_the_answer():
    with pytest.raises(AssertionError, match=re.escape("The answer text does not contain '8,612 m'.")):
        assert_cites(await run('anthropic'), WIKI.url, quote='8,612 m')
    with pytest.raises(AssertionError, match=re.escape("does not contain ''")):
        assert_cites(await run('anthropic'), WIKI.url, quote='')


def test_cites_ignores_documents_and_lists_no_url_when_none_is_cited():
    doc = DocumentCitationSource(document_id='file-1', title='K2 notes')
    answer = answer_of('K2 is tall.', Citation([doc], anchor=ContentCitationAnchor(start=0, end=2)))
    with pytest.raises(AssertionError, match=r"citing 'https://example.com/k2'; cited: none\."):
        assert_cites(answer, 'https://example.com/k2')


# --- assert_no_raw_markup ---------------------------------------------------------------------------------------------


async def test_no_raw_markup_passes_on_clean_answers():
    for style in ('anthropic', 'openai-responses', 'xai'):
        result = await run(style)
        assert_no_raw_markup(result)
        assert_no_raw_markup(CitedAnswer.from_result(result))


async def test_no_raw_markup_fails_on_the_text_a_run_returned():
    result = await raw_text_agent(
        f'K2 is 8,611 m tall.{MARKER} It is remote. (cite index="0-1">Few</cite> climb it.'
    ).run('q')
    with pytest.raises(AssertionError) as excinfo:
        assert_no_raw_markup(result)
    assert message(excinfo) == snapshot("""\
Raw citation markup reached the text: openai_marker at 19-38: '\\ue200cite\\ue202turn0search0\\ue201'; cite_tag at 53-81: '(cite index="0-1">Few</cite>'.
Expected: no citation markup in the text: show `CitedAnswer.text` (markup removed, each removal a problem), or resolve OpenAI markers with `TrackCitations(marker_sources=...)`.
The answer (as render_markdown(answer, 'footnotes') shows it):
    K2 is 8,611 m tall. It is remote. Few climb it.\
""")
    # The answer a reader is shown has it removed (and says so in its problems).
    assert_no_raw_markup(CitedAnswer.from_result(result))
    # Resolving the markers with `TrackCitations` rewrites the text in place.
    track = TrackCitations(marker_sources={'turn0search0': WIKI})
    agent = Agent(raw_text_agent(f'K2 is 8,611 m tall.{MARKER}').model, capabilities=[track])
    assert_no_raw_markup(await agent.run('q'))


async def test_no_raw_markup_lists_issues_and_at_most_five():
    text = ' '.join(f'Fact {i}.【{i}:0†source】' for i in range(7)) + ' Open \ue200cite\ue202turn9'
    with pytest.raises(AssertionError) as excinfo:
        assert_no_raw_markup(await raw_text_agent(text).run('q'))
    assert '; and 3 more.' in message(excinfo)
    hand_built = CitedAnswer('Open \ue200cite\ue202turn9')  # built by hand: nothing cleaned it
    with pytest.raises(AssertionError, match=r'openai_marker \(unterminated_marker\) at 5-'):
        assert_no_raw_markup(hand_built)


def test_no_raw_markup_on_a_result_without_a_response():
    @dataclass
    class NoResponse:
        def all_messages(self) -> list[ModelMessage]:
            return []

    assert_no_raw_markup(NoResponse())


# --- assert_complete ------------------------------------------------------------------------------------------------


async def test_complete_passes_for_a_finished_run_and_fails_for_a_cut_stream():
    assert_complete(await Agent(CitingModel(TEXT, CITES, style='google')).run('q'))
    agent = Agent(CitingModel(TEXT, CITES, style='anthropic', end_stream_after=2))
    async with agent.run_stream('q') as stream:
        await stream.get_output()
    with pytest.raises(AssertionError) as excinfo:
        assert_complete(stream)
    assert message(excinfo) == snapshot("""\
The answer is not complete. The response ended without Anthropic's `message_delta.stop_reason`: the stream was cut before the provider finished; text and citations may be missing (citations often arrive last).
Expected: a complete answer (the provider's finish signal).
The answer (as render_markdown(answer, 'footnotes') shows it):
    K2 is 8,611 m tall.

    *⚠ This answer is incomplete: the response did not finish, so text and citations may be missing.*\
""")


def test_complete_fails_for_an_interrupted_response():
    with pytest.raises(AssertionError, match=r"The answer is not complete\. The response is 'interrupted'"):
        assert_complete(answer_of('K2 is', state='interrupted'))


# --- assert_no_lost_citations ---------------------------------------------------------------------------------------


async def test_no_lost_citations_against_the_scripted_model():
    model = CitingModel(TEXT, CITES, style='google')
    result = await Agent(model).run('q')
    assert_no_lost_citations(result, model)
    lost = answer_of(TEXT, Citation([WIKI], anchor=ContentCitationAnchor(start=0, end=19)))
    with pytest.raises(AssertionError) as excinfo:
        assert_no_lost_citations(lost, model)
    assert message(excinfo) == snapshot("""\
1 of 2 citation(s) sent on the wire are lost: scripted citation of 'China–Pakistan border' to 'https://example.com/border'.
Expected: every citation sent to be a span, a source card, `raw_only` data or a problem.
The answer (as render_markdown(answer, 'footnotes') shows it):
    K2 is 8,611 m tall.[^1] It lies on the China–Pakistan border.

    [^1]: [K2 - Wikipedia](https://en.wikipedia.org/wiki/K2) (en.wikipedia.org)\
""")


@pytest.mark.parametrize(
    ('kept', 'lost'),
    [
        pytest.param(  # another page with the same title
            WebCitationSource('https://en.wikipedia.org/wiki/K2', title='K2'),
            WebCitationSource('https://britannica.com/place/K2', title='K2'),
            id='same-title',
        ),
        pytest.param(  # another document
            DocumentCitationSource(document_id='file-aaa', title='Survey'),
            DocumentCitationSource(document_id='file-bbb', title='Atlas'),
            id='another-document',
        ),
    ],
)
async def test_no_lost_citations_is_not_fooled_by_a_look_alike(kept: Any, lost: Any):
    """A kept citation that shares a title, or only its kind, with the lost one does not account for it."""
    model = CitingModel(
        'K2 is 8,611 m tall. It is in the Karakoram.',
        [ScriptedCitation('K2 is 8,611 m tall.', [kept]), ScriptedCitation('It is in the Karakoram.', [lost])],
        style='anthropic',
    )
    assert_no_lost_citations(await Agent(model).run('q'), model)
    broken = answer_of(
        'K2 is 8,611 m tall. It is in the Karakoram.', Citation([kept], anchor=ContentCitationAnchor(start=0, end=19))
    )
    with pytest.raises(
        AssertionError, match=r'^1 of 2 citation\(s\) sent on the wire are lost: .*It is in the Karakoram'
    ):
        assert_no_lost_citations(broken, model)


def test_a_web_citation_is_kept_only_by_its_url():
    """Google grounds two pages on one segment: the span kept for one page does not account for the other."""
    from pydantic_ai_citations.testing._seams import _expected, unaccounted  # pyright: ignore[reportPrivateUsage]

    answer = answer_of('K2 is 8,611 m tall.', Citation([WIKI], anchor=ContentCitationAnchor(start=0, end=19)))
    other = _expected('grounding_support https://b.example/k2', url='https://b.example/k2', offsets=(0, 19))
    assert unaccounted(answer, [other]) == ['grounding_support https://b.example/k2']


async def test_no_lost_citations_counts_what_a_cut_stream_sent():
    """Cut after the first block and its citation went out, before the second's: only the first was sent."""
    model = CitingModel(TEXT, CITES, style='anthropic', end_stream_after=3)
    async with Agent(model, capabilities=[TrackCitations()]).run_stream('q') as stream:
        await stream.get_output()
    assert_no_lost_citations(stream, model)
    assert_no_lost_citations(answer_of(TEXT, state='interrupted'), CitingModel(TEXT, CITES, end_stream_after=1))
    with pytest.raises(AssertionError) as excinfo:
        assert_no_lost_citations(answer_of('K2 is 8,611 m tall. It lies on ', state='interrupted'), model)
    assert message(excinfo).splitlines()[0] == snapshot(
        "1 of 1 citation(s) sent on the wire are lost: scripted citation of 'K2 is 8,611 m tall.' to 'https://en.wikipedia.org/wiki/K2'."
    )
    with pytest.raises(AssertionError, match=r'2 of 2 citation\(s\) sent on the wire are lost'):
        assert_no_lost_citations(answer_of(TEXT), model)  # complete: not cut, so `request` sent both


async def test_no_lost_citations_against_a_recording(corpus: Path):
    path = (
        corpus
        / 'pydantic-ai-cassettes/tests/models/cassettes/test_openai/test_openai_responses_web_search_citations.yaml'
    )
    recording = load_recording(path)
    result = await Agent(recording.model(), capabilities=[TrackCitations()]).run(
        recording.prompt or 'q', model_settings=recording.model_settings
    )
    assert_no_lost_citations(result, recording)
    assert_no_lost_citations(result, str(path))
    answer = CitedAnswer.from_result(result)
    assert_no_lost_citations(answer, path)
    wire = count_wire_citations('openai-responses', recording.responses[0].payload)
    assert_no_lost_citations(answer, [*wire, *wire])  # the same object twice counts once
    with pytest.raises(AssertionError, match=rf'{len(wire)} of {len(wire)} citation\(s\) sent on the wire are lost'):
        assert_no_lost_citations(CitedAnswer(answer.text), wire)


async def test_no_lost_citations_of_a_follow_up_run_counts_its_own_responses(corpus: Path):
    """A second run of a two-run recording, given the first run's messages: the citations of the first response were
    accounted for by the first run; counting every response of the history failed the second ("2 of 7 lost")."""
    path = (
        corpus / 'pydantic-ai-cassettes/tests/models/cassettes/test_anthropic/test_anthropic_web_search_citations.yaml'
    )
    recording = load_recording(path)
    assert len(recording.responses) == 2
    agent = Agent(recording.model())
    first = await agent.run(recording.prompt or 'q', model_settings=recording.model_settings)
    assert_no_lost_citations(first, recording)
    second = await agent.run(
        'And a follow-up?', message_history=first.all_messages(), model_settings=recording.model_settings
    )
    assert_no_lost_citations(second, recording)
    wire = count_wire_citations('anthropic-messages', recording.responses[1].payload)
    assert len(wire) == 1
    with pytest.raises(AssertionError, match=r'1 of 1 citation\(s\) sent on the wire are lost'):
        assert_no_lost_citations(CitedAnswer(CitedAnswer.from_result(second).text), wire)


def test_no_lost_citations_lists_at_most_five():
    sources = [WebCitationSource(f'https://example.com/{i}') for i in range(7)]
    model = CitingModel(TEXT, [ScriptedCitation('K2 is 8,611 m tall.', sources)], style='anthropic')
    with pytest.raises(AssertionError, match=r"7 of 7 .*https://example.com/4'; \.\.\.\."):
        assert_no_lost_citations(CitedAnswer(TEXT), model)


def test_no_lost_citations_rejects_what_is_not_a_wire():
    with pytest.raises(UserError) as excinfo:
        assert_no_lost_citations(CitedAnswer(TEXT), [1, 2])  # pyright: ignore[reportArgumentType]
    assert str(excinfo.value) == snapshot(
        'assert_no_lost_citations(): `wire` must be a `Recording` or its path, the `CitingModel` the run used, or a list of `WireCitation` (`formats.wire.count_wire_citations`); got [1, 2].'
    )


# --- assert_clean_output --------------------------------------------------------------------------------------------


class Fact(BaseModel):
    claim: str
    sources: list[str]


@dataclass
class Facts:
    facts: list[Fact]


def test_clean_output_passes_on_clean_values():
    assert_clean_output(Facts([Fact(claim='K2 is 8,611 m tall.', sources=['https://en.wikipedia.org/wiki/K2'])]))
    assert_clean_output({'a': [1, 2.5, None, True]})
    assert_clean_output('Always (cite sources) when the error rate is > 5%.')  # prose, not markup
    assert_clean_output(None)


def test_clean_output_fails_on_markup_in_any_field_or_key():
    output = Facts([Fact(claim=f'K2 is 8,611 m tall.{MARKER}', sources=['(cite index="0-1">wiki</cite>'])])
    with pytest.raises(AssertionError) as excinfo:
        assert_clean_output(output)
    assert message(excinfo) == snapshot("""\
Citation markup in the structured output:
  - facts[0].claim: openai_marker '\\ue200cite\\ue202turn0search0\\ue201'
  - facts[0].sources[0]: cite_tag '(cite index="0-1">wiki</cite>'
Expected: no citation markup in any field; add `StripCitationMarkup()` to the agent (it removes markup before validation and keeps what it removed).
The output (as JSON):
    {
      "facts": [
        {
          "claim": "K2 is 8,611 m tall.\\ue200cite\\ue202turn0search0\\ue201",
          "sources": [
            "(cite index=\\"0-1\\">wiki</cite>"
          ]
        }
      ]
    }\
""")
    with pytest.raises(AssertionError, match=r'keys are never rewritten'):
        assert_clean_output({f'claim{MARKER}': 'x'})


def _fact_agent(*capabilities: Any) -> Agent[None, Fact]:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        args = {'claim': f'K2 is 8,611 m tall.{MARKER}', 'sources': ['wiki']}
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        from pydantic_ai.models.function import DeltaToolCall

        args = '{"claim": "K2 is 8,611 m tall.\\ue200cite\\ue202turn0search0\\ue201", "sources": ["wiki"]}'
        yield {0: DeltaToolCall(name=info.output_tools[0].name, json_args=args, tool_call_id='c1')}

    return Agent(FunctionModel(answer, stream_function=stream), output_type=Fact, capabilities=list(capabilities))


async def test_clean_output_reads_a_run_result():
    with pytest.raises(AssertionError, match=r'claim: openai_marker'):
        assert_clean_output(await _fact_agent().run('q'))
    assert_clean_output(await _fact_agent(StripCitationMarkup()).run('q'))
    async with _fact_agent().iter('q') as agent_run:
        with pytest.raises(UserError, match='has not finished'):
            assert_clean_output(agent_run)
        async for _ in agent_run:
            pass
    with pytest.raises(AssertionError, match=r'claim: openai_marker'):
        assert_clean_output(agent_run)
    async with _fact_agent().run_stream('q') as stream:
        with pytest.raises(UserError, match=re.escape('pass `await result.get_output()`')):
            assert_clean_output(stream)
        with pytest.raises(AssertionError, match=r'claim: openai_marker'):
            assert_clean_output(await stream.get_output())


# --- what the helpers accept ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    'helper', [assert_cites, assert_no_raw_markup, assert_complete, assert_no_lost_citations], ids=lambda f: f.__name__
)
@pytest.mark.parametrize(
    ('subject', 'hint'),
    [
        pytest.param('K2 is tall.', None, id='str'),
        pytest.param(None, None, id='none'),
        pytest.param(
            [ModelResponse(parts=[TextPart('x')])],
            'For a list of messages, use `CitedAnswer.from_messages(messages)`.',
            id='messages',
        ),
        pytest.param(
            Fact(claim='K2', sources=[]), 'For a structured output, use `assert_clean_output(output)`.', id='model'
        ),
        pytest.param({'claim': 'K2'}, 'For a structured output, use `assert_clean_output(output)`.', id='dict'),
    ],
)
def test_answer_helpers_reject_what_is_not_a_result_or_answer(helper: Any, subject: object, hint: str | None):
    extra: dict[str, tuple[object, ...]] = {'assert_cites': ('https://x.org',), 'assert_no_lost_citations': ([],)}
    args = extra.get(helper.__name__, ())
    expected = rf'^{helper.__name__}\(\): `subject` must be the result of `agent.run`.*or a `CitedAnswer`; got '
    with pytest.raises(UserError, match=expected) as excinfo:
        helper(subject, *args)
    message = str(excinfo.value)
    assert message.endswith(hint) if hint else 'For a' not in message


async def test_clean_output_rejects_what_is_not_an_output():
    with pytest.raises(UserError, match=re.escape('got a `CitedAnswer`: use `assert_no_raw_markup(answer)`')):
        assert_clean_output(CitedAnswer(TEXT))
    with pytest.raises(UserError, match=r"^assert_clean_output\(\): `output` must be a run's result.*read as JSON\.$"):
        assert_clean_output(object())
    agent = _fact_agent()
    with pytest.raises(UserError, match=re.escape("That is the agent: pass the run's result")):
        assert_clean_output(agent)
    result = await agent.run('q')
    with pytest.raises(UserError, match=re.escape("That is a run's messages: pass the run's result or its `output`")):
        assert_clean_output(result.all_messages())
    pending = agent.run('q')
    try:
        with pytest.raises(UserError, match=re.escape('Did you forget `await`?')):
            assert_clean_output(pending)
    finally:
        pending.close()


# --- the README's example test --------------------------------------------------------------------------------------


async def test_the_readme_example_test_runs_and_passes(monkeypatch: pytest.MonkeyPatch):
    from pydantic_ai import models
    from test_examples import ROOT, code_blocks, doc_model  # the docs' offline models

    monkeypatch.setattr(models, 'infer_model', doc_model)
    (code,) = [code for _, code, _ in code_blocks(ROOT / 'README.md') if 'async def test_k2_answer_is_cited' in code]
    namespace: dict[str, Any] = {}
    exec(compile(code, 'README.md', 'exec'), namespace)  # the repository's own README
    await namespace['test_k2_answer_is_cited']()


async def test_the_readme_failure_message_is_the_real_one():
    from test_examples import ROOT

    with pytest.raises(AssertionError) as excinfo:
        assert_cites(await run('anthropic'), BORDER.url, quote='8,611 m')
    assert f'```text\n{message(excinfo)}\n```' in (ROOT / 'README.md').read_text()


@pytest.mark.parametrize(
    ('quote', 'cited'),
    [
        ('Everest is 8.849 km tall', True),  # a decimal point ends no sentence
        ('Everest is 8.849 km tall.', True),
        ('K2 is 8,611 m tall.', False),  # the sentence before the one the marker closes
        ('tall. Everest', False),
    ],
)
def test_assert_cites_a_marker_for_the_words_of_its_sentence_only(quote: str, cited: bool):
    text = 'K2 is 8,611 m tall. Everest is 8.849 km tall.[1]'
    answer = answer_of(text, Citation([WIKI], anchor=MarkerCitationAnchor(start=text.index('[1]'), end=len(text))))
    if cited:
        assert_cites(answer, WIKI.url, quote=quote)
    else:
        with pytest.raises(AssertionError, match='is cited, but not for'):
            assert_cites(answer, WIKI.url, quote=quote)


@pytest.mark.anyio
@pytest.mark.parametrize('style', ['anthropic', 'bedrock'])
async def test_a_lost_document_citation_known_by_its_title_is_lost(style: CitingStyle):
    """Two scripted document sources known by their titles, the second's citation lost downstream: it was taken for
    one known only by position, which any document that stayed stands for (a false pass)."""
    import dataclasses

    text = 'Returns are accepted for thirty days. Shipping is free over fifty euros.'
    sources = [DocumentCitationSource(title='returns.txt'), DocumentCitationSource(title='shipping.txt')]
    model = CitingModel(
        text,
        [
            ScriptedCitation('Returns are accepted for thirty days.', [sources[0]]),
            ScriptedCitation('Shipping is free over fifty euros.', [sources[1]]),
        ],
        style=style,
    )
    result = await Agent(model).run('q')
    assert_no_lost_citations(result, model)
    response = result.all_messages()[-1]
    assert isinstance(response, ModelResponse)
    cited = [i for i, p in enumerate(response.parts) if isinstance(p, TextPart) and p.citations]
    parts = list(response.parts)
    parts[cited[-1]] = dataclasses.replace(cast(TextPart, parts[cited[-1]]), citations=None, provider_details=None)
    answer = CitedAnswer.from_messages([*result.all_messages()[:-1], dataclasses.replace(response, parts=parts)])
    with pytest.raises(AssertionError, match=r"1 of 2 citation\(s\) sent on the wire are lost: .*'shipping.txt'"):
        assert_no_lost_citations(answer, model)

"""Every citation on the wire reaches a span, a source card, `raw_only` data or a problem (issue 14 point 1)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIResponsesModel, OpenAIResponsesModelSettings
from pydantic_ai.providers.openai import OpenAIProvider
from test_formats_unmapped import CONTAINER_BODY, PLOT_TEXT, json_client

from pydantic_ai_citations import CitedAnswer, TrackCitations
from pydantic_ai_citations.testing import check_seams, load_recording

pytestmark = pytest.mark.anyio

CASSETTES = 'pydantic-ai-cassettes/tests/models/cassettes'
CODE_IMAGE_STREAM = f'{CASSETTES}/test_openai_responses/test_openai_responses_code_execution_return_image_stream.yaml'


# -- a. OpenAI container_file_citation ------------------------------------------------------------------------------


async def test_container_file_citation_recovered_without_user_setting():
    track = TrackCitations()
    provider = OpenAIProvider(api_key='x', http_client=json_client(CONTAINER_BODY))
    agent = Agent(OpenAIResponsesModel('gpt-5', provider=provider), capabilities=[track])
    result = await agent.run('plot')
    run = track.report(result)
    answer = run.answer
    assert [(answer.text[s.start : s.end], s.sources) for s in answer.spans] == [('sandbox:/mnt/data/plot.png', [1])]
    assert answer.sources[0].document_id == 'cfile_b'
    assert [r.data['file_id'] for r in answer.raw_only if isinstance(r.data, dict)] == ['cfile_a']  # at 0-0
    assert not [p for p in run.problems if p.code == 'unmapped_provider_citation']
    assert PLOT_TEXT[28:54] == 'sandbox:/mnt/data/plot.png'


async def test_container_file_citation_setting_turned_off_is_a_problem():
    track = TrackCitations()
    provider = OpenAIProvider(api_key='x', http_client=json_client(CONTAINER_BODY))
    agent = Agent(
        OpenAIResponsesModel('gpt-5', provider=provider),
        capabilities=[track],
        model_settings=OpenAIResponsesModelSettings(openai_include_raw_annotations=False),
    )
    result = await agent.run('plot')
    run = track.report(result)
    assert run.answer.spans == []
    problems = [p for p in run.problems if p.code == 'unmapped_provider_citation']
    assert len(problems) == 1
    assert 'openai_include_raw_annotations' in problems[0].message
    # Without the capability nothing is turned on: the answer simply has no citation (and no claim of one).
    assert CitedAnswer.from_result(result).spans == []


async def test_container_file_citation_recording_every_path(corpus: Path):
    report = await check_seams(load_recording(corpus / CODE_IMAGE_STREAM), max_cuts=1)
    report.assert_ok()


# -- c/d. Perplexity Sonar: every search result is a span or raw_only data --------------------------------------------

PERPLEXITY = 'vercel-ai-fixtures/packages/perplexity/src/__fixtures__'


@pytest.mark.parametrize('name', ['perplexity-citations.json', 'perplexity-citations.chunks.txt'])
async def test_sonar_uncited_results_are_accounted(corpus: Path, name: str):
    recording = load_recording(corpus / PERPLEXITY / name)
    report = await check_seams(recording, paths=['run', 'run_stream', 'stream_cited', 'store'], max_cuts=1)
    report.assert_ok()

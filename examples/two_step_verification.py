"""Strict JSON *and* provider-backed citations: extract claims as structured output, then verify them with citations.

Step 1 extracts claims as structured output (no provider citations there: Pydantic AI only asks for them when the
output is text). Step 2, `verify_claims`, asks a citing model about each claim with the documents in the prompt
(`BinaryContent(text/plain)` / `DocumentUrl`, which Anthropic and Bedrock cite when `Citations()` is on) and returns a
`CitedAnswer` per claim, with the cited documents tied back to your ids.

Runs offline: both steps use a `FunctionModel`; the second answers the way Anthropic does (a cited text block whose
citation carries the quoted document text). With a real key, pass `model='anthropic:claude-sonnet-4-5'` instead.

    python examples/two_step_verification.py
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel
from pydantic_ai import Agent, Citation, ContentCitationAnchor, DocumentCitationSource, TextPart
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_citations import Claim, verify_claims

DOCUMENTS = {
    'q3-report': 'Revenue grew 12% in the third quarter. Operating costs fell by 3%.',
    'press-release': 'The company opened two new offices, in Lyon and in Porto.',
}


class Extraction(BaseModel):
    claims: list[Claim]


def extractor(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    claims = [
        {'text': 'Revenue grew 12% in Q3.', 'source_ids': ['q3-report']},
        {'text': 'The company opened an office in Madrid.', 'source_ids': ['press-release']},
    ]
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {'claims': claims})])


def citing_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Answers like Anthropic: a verdict line, then a text block cited with the quoted document text."""
    prompt = messages[-1].parts[-1]
    assert isinstance(prompt, UserPromptPart)
    claim = str(prompt.content[-1])
    if 'Revenue' in claim:
        verdict, text, quoted = (
            'SUPPORTED\n\n',
            'The report says revenue grew 12%.',
            'Revenue grew 12% in the third quarter.',
        )
    else:
        verdict, text, quoted = 'NOT SUPPORTED\n\n', 'The new offices are in Lyon and Porto.', 'in Lyon and in Porto'
    cited = Citation([DocumentCitationSource(excerpts=[quoted])], anchor=ContentCitationAnchor(start=0, end=len(text)))
    return ModelResponse(parts=[TextPart(verdict), TextPart(text, citations=[cited])])


async def main() -> None:
    extraction = await Agent(FunctionModel(extractor), output_type=Extraction).run('Extract the claims.')
    results = await verify_claims(extraction.output.claims, DOCUMENTS, model=FunctionModel(citing_model))
    for result in results:
        print(f'{result.claim.text}\n  verdict: {result.verdict}, supported: {result.supported}')
        print(f'  cited documents: {result.cited_document_ids}')
        for span in result.answer.spans:
            sources = [result.answer.source(n).excerpts for n in span.sources]
            print(f'  "{result.answer.span_text(span)}" <- {sources}')


if __name__ == '__main__':
    asyncio.run(main())

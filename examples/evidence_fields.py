"""Evidence as fields: the model names its sources inside the structured output, and the run checks them.

This is the application's own protocol, not provider citations: `Claim.source_ids` must be ids of sources a tool
returned in this run, and `Claim.quote` must appear in one of them. `VerifyEvidence` asks the model to fix what does
not check out (listing the valid ids), and raises `UnverifiedEvidenceError` once output retries run out.
Runs offline: the model is a `FunctionModel` that first cites an id it made up, then corrects itself.

    python examples/evidence_fields.py
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_citations import Claim, TrackCitations, VerifyEvidence

DOCUMENTS = [
    {'id': 'kb-101', 'title': 'Refund policy', 'text': 'Refunds are issued within 14 days of the return.'},
    {'id': 'kb-205', 'title': 'Shipping', 'text': 'Orders ship within 2 business days.'},
]


class SupportAnswer(BaseModel):
    answer: str
    claims: list[Claim]


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart('search_kb', {'query': 'refund'}, tool_call_id='s1')])
    retry = next((p for p in messages[-1].parts if isinstance(p, ToolReturnPart) and p.outcome == 'retried'), None)
    if retry is None:  # first answer: a made-up id and a paraphrase passed off as a quote
        claim = {'text': 'Refunds take two weeks.', 'source_ids': ['kb-999'], 'quote': 'refunds take 2 weeks'}
    else:
        print('retry message to the model:\n' + str(retry.content) + '\n')
        claim = {'text': 'Refunds take two weeks.', 'source_ids': ['kb-101'], 'quote': 'issued within 14 days'}
    output = {'answer': 'You get your refund within 14 days.', 'claims': [claim]}
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, output, tool_call_id='o1')])


track = TrackCitations()  # its report lists the problems every capability of the package recorded in the run
agent = Agent(FunctionModel(model), output_type=SupportAnswer, capabilities=[VerifyEvidence(), track])


@agent.tool_plain
def search_kb(query: str) -> list[dict[str, str]]:
    """Search the knowledge base; every result has an `id` to cite."""
    return DOCUMENTS


async def main() -> None:
    result = await agent.run('How long do refunds take?')
    print(result.output.model_dump_json(indent=2))
    print('problems recorded on the way:', [p.code for p in track.report(result).problems])


if __name__ == '__main__':
    asyncio.run(main())

"""Vercel AI data stream protocol: Pydantic AI's adapter plus the citations that arrive after their text part ended.

Pydantic AI's `VercelAIAdapter` puts citations on the `text-end` chunk only, from the part as it was at
`PartEndEvent`, and ignores deltas without text, so late citations (Google, OpenAI Chat, OpenRouter, xAI when
another part follows the text) never reach the UI stream. `CitedVercelAIEventStream` applies those deltas itself and
sends the late citations as a `data-pydantic-ai-citations` chunk (keyed by the UI text part id, so a later update
replaces it) plus `source-url` chunks for web sources not yet listed. `dump_messages` of the final history already
has them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from pydantic_ai import TextPart, WebCitationSource
from pydantic_ai.messages import PartDeltaEvent, PartEndEvent, PartStartEvent, TextPartDelta
from pydantic_ai.output import OutputDataT
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import AgentDepsT
from pydantic_ai.ui import UIEventStream
from pydantic_ai.ui.vercel_ai import VercelAIAdapter, VercelAIEventStream
from pydantic_ai.ui.vercel_ai.request_types import RequestData
from pydantic_ai.ui.vercel_ai.response_types import BaseChunk, DataChunk, SourceUrlChunk

from ._common import answer_json, citations_json, dump_citations, merged_citations, web_urls

__all__ = (
    'CITATIONS_DATA_TYPE',
    'CITED_ANSWER_DATA_TYPE',
    'CitedVercelAIAdapter',
    'CitedVercelAIEventStream',
    'cited_answer_chunk',
)

CITATIONS_DATA_TYPE = 'data-pydantic-ai-citations'
"""Vercel AI data chunk type carrying citations that arrived after their text part ended."""
CITED_ANSWER_DATA_TYPE = 'data-cited-answer'
"""Vercel AI data chunk type carrying a whole `CitedAnswer` (see `cited_answer_chunk`)."""


def cited_answer_chunk(result: AgentRunResult[object], *, redact: bool = False) -> DataChunk:
    """A Vercel AI data chunk with the run's whole `CitedAnswer` (JSON), for an `on_complete` callback.

    ```python
    async def on_complete(result):
        yield cited_answer_chunk(result)

    adapter.run_stream(on_complete=on_complete)
    ```

    Args:
        result: The completed run.
        redact: Hide document excerpts (see `redact`) before sending.
    """
    return DataChunk(type=CITED_ANSWER_DATA_TYPE, data=answer_json(result, redact=redact))


@dataclass
class _TextGroup:
    """One Vercel UI text part: consecutive text parts of a response."""

    text_id: str
    indexes: list[int]
    closed: bool = False
    sent: str | None = None
    """JSON of the citations the UI has (from `text-end` or our last data chunk)."""


@dataclass
class CitedVercelAIEventStream(VercelAIEventStream[AgentDepsT, OutputDataT]):
    """`VercelAIEventStream` that also delivers citations arriving after their text part ended.

    Late citations (Google, OpenAI Chat, OpenRouter, xAI when another part follows the text) are sent as a
    `data-pydantic-ai-citations` chunk with `id` = the UI text part's id and
    `data = {'text_id': ..., 'provider_name': ..., 'citations': [...]}` — every citation of that UI text part, anchors on its merged text,
    in the same shape as `providerMetadata.pydantic_ai.citations` — followed by `source-url` chunks for new web URLs.
    Merge `citations` into the text part's `providerMetadata.pydantic_ai.citations` on the client (see `docs/ui.md`)
    so that history sent back restores them.
    """

    _cit_parts: dict[int, TextPart] = field(default_factory=dict[int, TextPart], init=False, repr=False)
    _cit_at_end: dict[int, TextPart] = field(default_factory=dict[int, TextPart], init=False, repr=False)
    _cit_groups: dict[int, _TextGroup] = field(default_factory=dict[int, _TextGroup], init=False, repr=False)
    _cit_open: _TextGroup | None = field(default=None, init=False, repr=False)
    _cit_urls: set[str] = field(default_factory=set[str], init=False, repr=False)

    async def handle_part_start(self, event: PartStartEvent) -> AsyncIterator[BaseChunk]:
        if event.index == 0 and 0 in self._cit_at_end:  # a new model response: part indexes start over
            self._cit_parts.clear()
            self._cit_at_end.clear()
            self._cit_groups.clear()
            self._cit_open = None
        async for chunk in super().handle_part_start(event):
            yield chunk
        part = event.part
        if isinstance(part, TextPart):
            # The parent starts a new UI text part unless this one follows text; it then holds the new id.
            if event.previous_part_kind != 'text' or self._cit_open is None:
                self._cit_open = _TextGroup(self.message_id, [])
            self._cit_open.indexes.append(event.index)
            self._cit_groups[event.index] = self._cit_open
            self._cit_parts[event.index] = part

    async def handle_part_delta(self, event: PartDeltaEvent) -> AsyncIterator[BaseChunk]:
        async for chunk in super().handle_part_delta(event):
            yield chunk
        delta = event.delta
        part = self._cit_parts.get(event.index)
        if not isinstance(delta, TextPartDelta) or part is None:
            return
        self._cit_parts[event.index] = delta.apply(part)
        group = self._cit_groups[event.index]
        if group.closed and delta.citations_delta is not None:
            for chunk in self._late_chunks(group):
                yield chunk

    async def handle_part_end(self, event: PartEndEvent) -> AsyncIterator[BaseChunk]:
        part = event.part
        group = self._cit_groups.get(event.index)
        if isinstance(part, TextPart) and group is not None:
            self._cit_parts[event.index] = part
            self._cit_at_end[event.index] = part
        async for chunk in super().handle_part_end(event):
            yield chunk
        if isinstance(part, TextPart) and group is not None and event.next_part_kind != 'text':
            # The parent has sent `text-end` with the parts as they were at their own ends, and listed their URLs.
            group.closed = True
            at_end = [self._cit_at_end.get(i, self._cit_parts[i]) for i in group.indexes]
            group.sent = citations_json(merged_citations(at_end))
            self._cit_urls.update(web_urls(merged_citations(at_end)))
            # A part of the group may have received citations after its own end but before the group closed.
            for chunk in self._late_chunks(group):
                yield chunk

    def _late_chunks(self, group: _TextGroup) -> list[BaseChunk]:
        parts = [self._cit_parts[i] for i in group.indexes]
        citations = merged_citations(parts)
        current = citations_json(citations)
        if current == group.sent:
            return []
        group.sent = current
        chunks: list[BaseChunk] = [
            DataChunk(
                type=CITATIONS_DATA_TYPE,
                id=group.text_id,
                data={
                    'text_id': group.text_id,
                    'provider_name': next((p.provider_name for p in parts if p.citations), None),
                    'citations': dump_citations(citations),
                },
            )
        ]
        for citation in citations:
            for source in citation.sources:
                if isinstance(source, WebCitationSource) and source.url not in self._cit_urls:
                    self._cit_urls.add(source.url)
                    chunks.append(SourceUrlChunk(source_id=source.url, url=source.url, title=source.title))
        return chunks


@dataclass
class CitedVercelAIAdapter(VercelAIAdapter[AgentDepsT, OutputDataT]):
    """`VercelAIAdapter` whose event stream is a `CitedVercelAIEventStream` (late citations reach the UI)."""

    def build_event_stream(self) -> UIEventStream[RequestData, BaseChunk, AgentDepsT, OutputDataT]:
        """Build the citation-aware Vercel AI event stream."""
        return CitedVercelAIEventStream(
            self.run_input,
            accept=self.accept,
            sdk_version=self.sdk_version,
            server_message_id=self.server_message_id,
            manage_system_prompt=self.manage_system_prompt,
        )

"""Vercel AI data stream protocol: Pydantic AI's adapter plus the citations that arrive after their text part ended.

Pydantic AI's `VercelAIAdapter` puts citations on the `text-end` chunk only, from the part as it was at
`PartEndEvent`, and ignores deltas without text, so late citations (Google, OpenAI Chat, OpenRouter, xAI when
another part follows the text) never reach the UI stream. `CitedVercelAIEventStream` applies those deltas itself and
sends the late citations as a `data-pydantic-ai-citations` chunk (keyed by the UI text part id, so a later update
replaces it) plus `source-url` chunks for web sources not yet listed. `dump_messages` of the final history already
has them. Its text deltas never carry citation markup (`formats.markup.StreamCleaner`), and every anchor it sends
(on `text-end` too) is an offset into the text the UI received. `CitedVercelAIAdapter.dump_messages` gives the UI
text parts as the stream sent them (no markup, anchors on that text). The fingerprints of `CleanStaleCitations` that
go to the UI (`UIMessage.metadata`, from `dump_messages` and the `message-metadata` chunk) are keyed to the parts
`load_messages` makes of that UI message, so history sent back is checked for edits as it was fingerprinted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast
from uuid import uuid4

from pydantic_ai import (
    Citation,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    NativeToolReturnPart,
    SpeechPart,
    TextPart,
    WebCitationSource,
)
from pydantic_ai.exceptions import RunCancelled
from pydantic_ai.messages import PartDeltaEvent, PartEndEvent, PartStartEvent, TextPartDelta
from pydantic_ai.output import OutputDataT
from pydantic_ai.run import AgentRunResult, AgentRunResultEvent
from pydantic_ai.tools import AgentDepsT
from pydantic_ai.ui import NativeEvent, OnCancelFunc, OnCompleteFunc, UIEventStream
from pydantic_ai.ui.vercel_ai import VercelAIAdapter, VercelAIEventStream
from pydantic_ai.ui.vercel_ai.request_types import (
    ProviderMetadata,
    RequestData,
    SourceDocumentUIPart,
    SourceUrlUIPart,
    TextUIPart,
    UIMessage,
    UIMessagePart,
)
from pydantic_ai.ui.vercel_ai.response_types import (
    BaseChunk,
    DataChunk,
    MessageMetadataChunk,
    SourceUrlChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
)

from .._answer import FINISH_METADATA_KEY, finish_record, incomplete_reason, unfinished_record
from .._checks import require_messages
from .._edit import METADATA_KEY, joined_fingerprint, moved_raw_offsets, shown_response
from ..formats.markup import Cut, offset_shifter, strip_joined
from ._common import (
    HeldTextEnds,
    TextBlock,
    answer_json,
    citations_json,
    cut_off_by,
    dump_citations,
    load_citations,
    merged_citations,
    require_ui_messages,
    shown_texts,
    web_urls,
)

__all__ = (
    'CITATIONS_DATA_TYPE',
    'CITED_ANSWER_DATA_TYPE',
    'STEPS_METADATA_KEY',
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

    Raises:
        UserError: `result` is not a run's result, or `redact` is not a bool.
    """
    return DataChunk(type=CITED_ANSWER_DATA_TYPE, data=answer_json(result, redact=redact, where='cited_answer_chunk'))


_RAW_CITATION_KEYS = ('citations', 'annotations')
"""The `provider_details` keys of a text part that hold raw citations with offsets into its text."""


def _with_citations(
    metadata: ProviderMetadata | None, citations: Sequence[Citation], cuts: Sequence[Cut] = (), base: int = 0
) -> ProviderMetadata | None:
    """`metadata` with `citations` in its `pydantic_ai.citations` (none: the key is left out).

    `cuts`: the ranges of the UI text part's text (its parts' texts joined) removed from what the UI shows; the raw
    provider citations' offsets into that text (`provider_details['citations']` and OpenAI's `['annotations']`) are
    moved onto the text as shown. `base`: where the parts' text starts in the text `cuts` are of (after a tail the
    response's previous text passed on: see `TextBlock`).
    """
    metadata = dict(metadata or {})
    ours = {k: v for k, v in metadata.get('pydantic_ai', {}).items() if k != 'citations'}
    details = ours.get('provider_details')
    if cuts and isinstance(details, dict):
        raw, shift = dict(cast('dict[str, object]', details)), offset_shifter(cuts)

        def move(offset: int) -> int:
            return shift(base + offset) - shift(base)

        for key in _RAW_CITATION_KEYS:  # (`annotations`: OpenAI's, kept with `openai_include_raw_annotations`)
            if key in raw:
                raw[key] = moved_raw_offsets(raw[key], move)
        ours['provider_details'] = raw
    if citations:
        ours['citations'] = dump_citations(citations)
    if ours:
        metadata['pydantic_ai'] = ours
    else:
        metadata.pop('pydantic_ai', None)
    return metadata or None


def _as_streamed(ui: UIMessage, *, cut_off: bool = False) -> UIMessage:
    """`ui` (one response) with each text part as `CitedVercelAIEventStream` sends it: no markup, anchors on its text.

    A UI text part holds consecutive text parts joined, and the stream cleans the response's texts with one cleaner,
    a text followed by another part passing what it holds back on to the next (`shown_texts`; a tail no text took
    is a text part of its own at the end). The citations `dump_messages` anchored on a UI text are moved onto the text
    as shown as the stream moves them (`merged_citations`); one whose anchor covered nothing but markup, or text the
    UI text does not show, keeps its sources, without an anchor (its `source-url` part stays). Provider data
    (`provider_details`) is as the stream leaves it: the offsets into the text in its raw citations moved onto the
    text as shown. `cut_off`: the response did not complete, so the text that ends it may end inside markup
    (`(cite index="1-1`): that tail is removed, as `CitedAnswer` removes it (`strip_markup(..., incomplete=True)`).
    """
    indexes = [i for i, part in enumerate(ui.parts) if isinstance(part, TextUIPart)]
    if not indexes:
        return ui
    texts = [cast(TextUIPart, ui.parts[i]) for i in indexes]
    last = _last_text(ui.parts)
    shown, tail = shown_texts([t.text for t in texts], ends_with_text=last is not None, cut_off=cut_off)
    parts: list[UIMessagePart] = list(ui.parts)
    for index, part, seen in zip(indexes, texts, shown, strict=True):
        if seen.text == part.text and not seen.carried and seen.kept == len(part.text):
            continue  # nothing removed, nothing passed on
        citations = load_citations((part.provider_metadata or {}).get('pydantic_ai', {}).get('citations'))
        held = seen.held_parts([TextPart(part.text, citations=citations)])
        stripped, part_cuts = strip_joined([p.content for p in held], incomplete=cut_off and index == last)
        moved = merged_citations(held, part_cuts=part_cuts)
        metadata = _with_citations(part.provider_metadata, moved, stripped.cuts, len(seen.carried))
        parts[index] = part.model_copy(update={'text': seen.text, 'provider_metadata': metadata})
    if tail:
        parts.append(TextUIPart(text=tail))
    return ui.model_copy(update={'parts': parts})


def _last_text(parts: Sequence[UIMessagePart]) -> int | None:
    """The index of the text part that ends a UI message (only source listings after it), if one does."""
    for index in range(len(parts) - 1, -1, -1):
        if isinstance(parts[index], TextUIPart):
            return index
        if not isinstance(parts[index], (SourceUrlUIPart, SourceDocumentUIPart)):
            return None
    return None


def _shown(part: ModelResponsePart) -> bool:
    """Whether `VercelAIAdapter.dump_messages` makes a UI part of `part` (a native tool return goes with its call)."""
    return not isinstance(part, (NativeToolReturnPart, SpeechPart))


def _rekeyed(ui: UIMessage, response: ModelResponse | None) -> UIMessage:
    """`ui` (dumped from `response`) as streamed, with this package's fingerprints keyed to the parts it loads as."""
    ui = _as_streamed(ui, cut_off=response is not None and incomplete_reason(response) is not None)
    ui = _with_finish(ui, response)
    metadata = cast(object, ui.metadata)
    if not isinstance(metadata, dict) or METADATA_KEY not in metadata:
        return ui
    ours = None
    if response is not None and (response.metadata or {}).get(METADATA_KEY) == metadata[METADATA_KEY]:
        ours = _loaded_fingerprint(response, ui)
    # Not matched with its response (never expected): no fingerprint rather than one keyed to the wrong parts.
    return ui.model_copy(update={'metadata': _with_ours(cast('dict[str, object]', metadata), ours)})


def _with_finish(ui: UIMessage, response: ModelResponse | None) -> UIMessage:
    """`ui` with `response`'s verdict when it is not complete (`FINISH_METADATA_KEY`).

    A UI message holds no finish reason: loaded back without the verdict, the response would be taken for complete.
    """
    record = unfinished_record(response) if response is not None else None
    metadata = cast(object, ui.metadata)
    if record is None or (isinstance(metadata, dict) and FINISH_METADATA_KEY in metadata):
        return ui  # (a verdict this package recorded on the response is in its metadata already)
    given = cast('dict[str, object]', metadata) if isinstance(metadata, dict) else {}
    return ui.model_copy(update={'metadata': {**given, FINISH_METADATA_KEY: record}})


def _loaded_fingerprint(response: ModelResponse, ui: UIMessage) -> dict[str, object] | None:
    """The fingerprints of `response` keyed to the response `load_messages` makes of `ui` (its UI message, as streamed).

    Consecutive text parts make one UI text part: the runs `dump_messages` joins are matched with what loads back.
    """
    runs: list[list[int]] = []
    follows_text = False
    for index, part in enumerate(response.parts):
        if isinstance(part, TextPart):
            if not follows_text:
                runs.append([])
            runs[-1].append(index)
        if _shown(part):
            follows_text = isinstance(part, TextPart)
    loaded = next(m for m in VercelAIAdapter[Any, Any].load_messages([ui]) if isinstance(m, ModelResponse))
    texts = [i for i, part in enumerate(loaded.parts) if isinstance(part, TextPart)]
    return joined_fingerprint(response, loaded, dict(zip(texts, runs, strict=False)))


def _with_ours(metadata: dict[str, object], ours: dict[str, object] | None) -> dict[str, object]:
    rest = {k: v for k, v in metadata.items() if k != METADATA_KEY}
    return rest if ours is None else {**rest, METADATA_KEY: ours}


STEPS_METADATA_KEY = f'{METADATA_KEY}_steps'
"""`UIMessage.metadata` key of the fingerprints of a streamed run of several responses: one entry per response, in order.

The AI SDK holds such a run as one UI message, which `load_messages` loads as several responses with the metadata on
the first; `CitedVercelAIAdapter.load_messages` gives each response its own entry (`ModelResponse.metadata` under
`pydantic_ai_citations`)."""


def _streamed_metadata(
    chunk: MessageMetadataChunk, result: AgentRunResult[Any], streamed: list[dict[str, object] | None] | None = None
) -> MessageMetadataChunk:
    """The run's message metadata with this package's fingerprints of the text the UI received.

    The UI message holds every response of the run the UI shows. Each one's fingerprints are keyed to the parts
    `load_messages` makes of it, on the text as streamed; for a run of one response they are the message's
    `pydantic_ai_citations`, for several they are listed, one per response, under `STEPS_METADATA_KEY`.
    """
    metadata = cast(object, chunk.message_metadata)
    given = cast('dict[str, object]', metadata) if isinstance(metadata, dict) else {}
    responses = [m for m in result.new_messages() if isinstance(m, ModelResponse) and any(map(_shown, m.parts))]
    prints = streamed
    if prints is None:  # keyed from the dump of each response, as the stream sends it
        prints = [_streamed_fingerprint(r, last=r is responses[-1]) for r in responses]
    rest = {k: v for k, v in given.items() if k not in (METADATA_KEY, STEPS_METADATA_KEY, FINISH_METADATA_KEY)}
    # The run's verdict: a UI message holds no finish reason (`load_messages` puts it on the message's last response).
    if (record := unfinished_record(result.response)) is not None:
        rest[FINISH_METADATA_KEY] = record
    if len(prints) > 1 and any(p is not None for p in prints):
        rest[STEPS_METADATA_KEY] = prints
    elif len(prints) == 1 and prints[0] is not None:
        rest[METADATA_KEY] = prints[0]
    if rest == given:  # (metadata that is not a dict counts as `{}`: nothing to add to it either)
        return chunk
    return chunk.model_copy(update={'message_metadata': rest})


def _streamed_fingerprint(response: ModelResponse, *, last: bool) -> dict[str, object] | None:
    """`response`'s fingerprints keyed to the parts it loads as from the stream's UI message (`None`: it has none)."""
    if METADATA_KEY not in (response.metadata or {}):
        return None
    (ui,) = [m for m in VercelAIAdapter[Any, Any].dump_messages([response]) if m.role == 'assistant']
    # Only the text that ends the run can have been cut off: what the stream did not show of it is not printed.
    cut_off = last and incomplete_reason(response) is not None
    return _loaded_fingerprint(response, _as_streamed(ui, cut_off=cut_off))


def _broken_metadata(error: Exception, result: AgentRunResult[Any] | None) -> list[BaseChunk]:
    """The verdict (`FINISH_METADATA_KEY`) for the message the UI keeps of a run whose stream `error` broke off.

    `result`: the run's, when it ended before (an `on_complete` callback raised): its answer is judged as it is.
    """
    if result is not None:
        record = unfinished_record(result.response)
    else:
        reason = (
            f'The stream broke off before the run ended ({type(error).__name__}: {error}); '
            'text and citations may be missing (citations often arrive last).'
        )
        record = finish_record(False, reason)
    return [] if record is None else [MessageMetadataChunk(message_metadata={FINISH_METADATA_KEY: record})]


def _spread_steps(loaded: list[ModelMessage], messages: Sequence[UIMessage]) -> None:
    """Give each response loaded from a streamed UI message what is its own of the message's metadata.

    The UI message's metadata is on the first response it loads as. Fingerprints of a run of several
    (`STEPS_METADATA_KEY`) go to it and the responses after it that the same UI message made, in order; the verdict on
    the run's end (`FINISH_METADATA_KEY`) goes to the last of them, which is the one it is about. When their number
    does not match (the UI changed the message), no fingerprint is given: none rather than one on the wrong response.
    """
    responses = [m for m in loaded if isinstance(m, ModelResponse)]
    # Each value by identity: the response carrying it is the first its UI message loads as.
    carrying: dict[int, int | None] = {}  # (`None`: on several responses, so whose it is cannot be told)
    for index, response in enumerate(responses):
        held = cast('dict[str, object]', response.metadata or {})
        for key in (STEPS_METADATA_KEY, FINISH_METADATA_KEY):
            if key in held:
                found = id(held[key])
                carrying[found] = None if found in carrying else index
    if not carrying:
        return
    for ui in messages:
        metadata = cast(object, ui.metadata)
        if ui.role != 'assistant' or not isinstance(metadata, dict):
            continue
        given = cast('dict[str, object]', metadata)
        steps, finish = given.get(STEPS_METADATA_KEY), given.get(FINISH_METADATA_KEY)
        first = next((carrying.get(id(v)) for v in (steps, finish) if v is not None), None)
        if first is None:
            continue
        try:
            count = sum(isinstance(m, ModelResponse) for m in VercelAIAdapter[Any, Any].load_messages([ui]))
        except Exception:  # pragma: no cover - it loaded in its history; alone it gets no fingerprints
            continue
        if first + count > len(responses) or count < 1:  # pragma: no cover - it loaded as these responses
            continue
        held = responses[first].metadata
        assert held is not None
        if finish is not None and count > 1:
            last = responses[first + count - 1]
            last.metadata = {**(last.metadata or {}), FINISH_METADATA_KEY: held.pop(FINISH_METADATA_KEY)}
        if steps is None:
            continue
        held.pop(STEPS_METADATA_KEY, None)
        entries = cast('list[object]', steps) if isinstance(steps, list) else []
        if len(entries) != count:
            continue
        for response, entry in zip(responses[first : first + count], entries, strict=True):
            if isinstance(entry, dict):
                response.metadata = {**(response.metadata or {}), METADATA_KEY: entry}


@dataclass
class CitedVercelAIEventStream(
    HeldTextEnds[RequestData, BaseChunk, AgentDepsT, OutputDataT], VercelAIEventStream[AgentDepsT, OutputDataT]
):
    """`VercelAIEventStream` whose text carries no citation markup and that also delivers late citations.

    Late citations (Google, OpenAI Chat, OpenRouter, xAI when another part follows the text) are sent as a
    `data-pydantic-ai-citations` chunk with `id` = the UI text part's id and
    `data = {'text_id': ..., 'provider_name': ..., 'citations': [...]}` — every citation of that UI text part, anchors on its merged text,
    in the same shape as `providerMetadata.pydantic_ai.citations` — followed by `source-url` chunks for new web URLs.
    Merge `citations` into the text part's `providerMetadata.pydantic_ai.citations` on the client (see `docs/ui.md`)
    so that history sent back restores them. Citations `TrackCitations` maps onto the parts once the response is done
    (resolved markers, Perplexity `[N]`, Cohere) are sent the same way. Text that arrives for a part after its UI text
    part ended is sent in a UI text part of its own (`_cit_late_text`).
    """

    _cit_parts: dict[int, TextPart] = field(default_factory=dict[int, TextPart], init=False, repr=False)
    _cit_at_end: dict[int, TextPart] = field(default_factory=dict[int, TextPart], init=False, repr=False)
    _cit_groups: dict[int, TextBlock] = field(default_factory=dict[int, TextBlock], init=False, repr=False)
    _cit_open: TextBlock | None = field(default=None, init=False, repr=False)
    _cit_urls: set[str] = field(default_factory=set[str], init=False, repr=False)
    _cit_sent: list[BaseChunk] = field(default_factory=list[BaseChunk], init=False, repr=False)
    """Every chunk sent: the message the AI SDK builds of them is what the fingerprints are of (`_cit_prints`)."""
    _cit_step: int = field(default=-1, init=False, repr=False)
    """Which of the run's responses (with parts) is being streamed."""
    _cit_owners: dict[str, tuple[int, list[int]]] = field(
        default_factory=dict[str, tuple[int, list[int]]], init=False, repr=False
    )
    """Each UI text's id: the response (`_cit_step`) and the parts whose text it holds."""

    def transform_stream(
        self,
        stream: AsyncIterator[NativeEvent],
        on_complete: OnCompleteFunc[BaseChunk] | None = None,
        on_cancel: OnCancelFunc[BaseChunk] | None = None,
    ) -> AsyncIterator[BaseChunk]:
        return self._cit_recorded(super().transform_stream(stream, on_complete, on_cancel))

    async def _cit_recorded(self, chunks: AsyncIterator[BaseChunk]) -> AsyncIterator[BaseChunk]:
        async for chunk in chunks:
            self._cit_sent.append(chunk)
            yield chunk

    async def handle_part_start(self, event: PartStartEvent) -> AsyncIterator[BaseChunk]:
        for chunk in self._cit_late_text():
            yield chunk
        if event.index == 0 and 0 in self._cit_at_end:  # a new model response: part indexes start over
            # With no turn between the two (an output validator's retry), `after_response` did not run: the citations
            # `TrackCitations` mapped onto the last response after its end go out now, before its parts are let go.
            for chunk in self._all_late_chunks():
                yield chunk
            self._cit_parts.clear()
            self._cit_at_end.clear()
            self._cit_groups.clear()
            self._cit_open = None
        if event.index == 0:
            self._cit_step += 1
        part = event.part
        if isinstance(part, TextPart):
            # The parent starts a new UI text part unless this one follows text.
            if event.previous_part_kind != 'text' or self._cit_open is None:
                self._cit_open = self._cit_new_block()
            self._cit_open.indexes.append(event.index)
            self._cit_groups[event.index] = self._cit_open
            self._cit_parts[event.index] = part
            event = replace(event, part=replace(part, content=self._cit_open.cleaner.feed(part.content)))
        async for chunk in super().handle_part_start(event):
            yield chunk
        if isinstance(part, TextPart) and self._cit_open is not None:
            self._cit_open.id = self.message_id
            self._cit_owners[self.message_id] = (self._cit_step, self._cit_open.indexes)

    async def handle_part_delta(self, event: PartDeltaEvent) -> AsyncIterator[BaseChunk]:
        delta = event.delta
        group = self._cit_groups.get(event.index)
        if not isinstance(delta, TextPartDelta) or group is None:
            async for chunk in super().handle_part_delta(event):
                yield chunk
            return
        self._cit_parts[event.index] = delta.apply(self._cit_parts[event.index])
        if (
            group.closed
        ):  # no text may follow `text-end`: late text goes in a UI text part of its own (`_cit_late_text`)
            group.late += delta.content_delta or ''
            for chunk in self._late_chunks(group):
                yield chunk
            return
        clean = group.cleaner.feed(delta.content_delta or '')
        async for chunk in super().handle_part_delta(replace(event, delta=replace(delta, content_delta=clean))):
            yield chunk

    async def handle_part_end(self, event: PartEndEvent) -> AsyncIterator[BaseChunk]:
        part = event.part
        group = self._cit_groups.get(event.index)
        if isinstance(part, TextPart) and group is not None:
            self._cit_parts[event.index] = part
            self._cit_at_end[event.index] = part
            if event.next_part_kind != 'text' and self._cit_hold(group.cleaner.holds_opening, event):
                return  # prose or cut-off markup: `_cit_end_text` runs once that is known
        async for chunk in self._cit_end_text(event, cut_off=self._cit_broken):
            yield chunk

    async def _cit_end_text(self, event: PartEndEvent, *, cut_off: bool) -> AsyncIterator[BaseChunk]:
        part = event.part
        group = self._cit_groups.get(event.index)
        at_end: list[Citation] | None = None
        cuts: Sequence[Cut] = ()
        base = 0
        if isinstance(part, TextPart) and group is not None and event.next_part_kind != 'text':
            rest, parts = self._cit_close(group, self._cit_at_end, event, cut_off=cut_off)
            if rest:
                yield TextDeltaChunk(id=group.id, delta=rest)
            stripped, part_cuts = strip_joined([p.content for p in parts], incomplete=group.cut_off)
            at_end = merged_citations(parts, part_cuts=part_cuts)
            cuts, base = stripped.cuts, len(group.carried)
        async for chunk in super().handle_part_end(event):
            # The parent anchors `text-end`'s citations (and the raw ones, joined) on the parts' raw text; the UI got
            # it stripped as one text.
            if at_end is not None and isinstance(chunk, TextEndChunk):
                metadata = _with_citations(chunk.provider_metadata, at_end, cuts, base)
                chunk = chunk.model_copy(update={'provider_metadata': metadata})
            yield chunk
        if at_end is not None and group is not None:
            # `text-end` has the parts as they were at their own ends, and the parent listed their URLs.
            group.closed = True
            group.sent = citations_json(at_end)
            self._cit_urls.update(web_urls(at_end))
            # A part of the group may have received citations after its own end but before the group closed.
            for chunk in self._late_chunks(group):
                yield chunk

    async def after_response(self) -> AsyncIterator[BaseChunk]:
        for chunk in self._cit_late_text():
            yield chunk
        async for chunk in super().after_response():
            yield chunk  # pragma: no cover - the parent sends nothing here (Pydantic AI 2.68)
        # `TrackCitations` maps raw formats onto the parts in place once the response is done (resolved markers,
        # Perplexity `[N]`, Cohere): the parts this stream holds from their `PartEndEvent` show it now.
        for chunk in self._all_late_chunks():
            yield chunk

    async def handle_run_result(self, event: AgentRunResultEvent[Any]) -> AsyncIterator[BaseChunk]:
        for chunk in self._cit_late_text():
            yield chunk
        # The run's last response is the last word: a part that got citations after its end is a new object here,
        # and only that object saw changes made in place afterwards. Its citations go before the message metadata,
        # whose fingerprints are of the UI message with them.
        parts = event.result.response.parts
        self._cit_parts.update({i: p for i, p in enumerate(parts) if i in self._cit_parts and isinstance(p, TextPart)})
        for chunk in self._all_late_chunks():
            yield chunk
        async for chunk in super().handle_run_result(event):
            # The parent sends the response's metadata, fingerprints keyed to its parts: key them to the UI's.
            if isinstance(chunk, MessageMetadataChunk):
                chunk = _streamed_metadata(chunk, event.result, self._cit_prints(event.result))
            yield chunk

    def _cit_prints(self, result: AgentRunResult[Any]) -> list[dict[str, object] | None] | None:
        """The fingerprints of each response the UI message loads as, of the message the AI SDK builds of the chunks.

        Each UI text is keyed to the parts whose text it holds (text that arrived for a part after its UI text ended
        is a UI text of its own). `None` when that message cannot be matched with the run's responses (its texts
        load as responses other than the ones they were sent for): the fingerprints are then keyed from the dump.
        """
        from ._vercel_message import ui_message_with_text_ids

        run = [m for m in result.new_messages() if isinstance(m, ModelResponse) and m.parts]
        if not any(METADATA_KEY in (r.metadata or {}) for r in run):
            return None
        ui, ids = ui_message_with_text_ids(self._cit_sent)
        try:
            loaded = [m for m in VercelAIAdapter[Any, Any].load_messages([ui]) if isinstance(m, ModelResponse)]
        except Exception:  # pragma: no cover - the message of what this stream sent loads
            return None
        prints: list[dict[str, object] | None] = []
        texts = iter(ids)
        for response in loaded:
            places = [i for i, part in enumerate(response.parts) if isinstance(part, TextPart)]
            owners = [self._cit_owners.get(next(texts, '')) for _ in places]
            steps = {owner[0] for owner in owners if owner is not None}
            if None in owners or len(steps) > 1 or any(s >= len(run) for s in steps):
                return None
            if not steps:
                prints.append(None)
                continue
            sent = run[steps.pop()]
            joins = {place: owner[1] for place, owner in zip(places, owners, strict=True) if owner is not None}
            if not all(
                i < len(sent.parts) and isinstance(sent.parts[i], TextPart) for held in joins.values() for i in held
            ):
                return None
            prints.append(joined_fingerprint(sent, response, joins) if METADATA_KEY in (sent.metadata or {}) else None)
        return prints

    async def on_error(self, error: Exception) -> AsyncIterator[BaseChunk]:
        for chunk in self._cit_late_text(cut_off=True):
            yield chunk
        for chunk in _broken_metadata(error, self._result):
            yield chunk
        async for chunk in super().on_error(error):
            yield chunk

    async def on_cancelled(self, cancelled: RunCancelled) -> AsyncIterator[BaseChunk]:
        for chunk in self._cit_late_text(cut_off=True):
            yield chunk
        if cut_off_by(cancelled):
            for chunk in _broken_metadata(cancelled, None):
                yield chunk
        async for chunk in super().on_cancelled(cancelled):
            yield chunk

    def _cit_blocks(self) -> list[TextBlock]:
        return list({id(g): g for g in self._cit_groups.values()}.values())

    def _cit_text_events(self, text: str, block: TextBlock | None) -> list[BaseChunk]:
        text_id = str(uuid4())  # (not `new_message_id()`: the part being streamed keeps its id)
        if block is not None:
            self._cit_owners[text_id] = (self._cit_step, block.indexes)
        return [TextStartChunk(id=text_id), TextDeltaChunk(id=text_id, delta=text), TextEndChunk(id=text_id)]

    def _all_late_chunks(self) -> list[BaseChunk]:
        groups = {id(g): g for g in self._cit_groups.values() if g.closed}
        return [chunk for group in groups.values() for chunk in self._late_chunks(group)]

    def _late_chunks(self, group: TextBlock) -> list[BaseChunk]:
        # Anchored on the text the group's UI text part holds: not on text that arrived after its `text-end`.
        parts = group.held_parts(self._cit_parts)
        citations = merged_citations(parts, cut_off=group.cut_off)
        current = citations_json(citations)
        if current == group.sent:
            return []
        group.sent = current
        chunks: list[BaseChunk] = [
            DataChunk(
                type=CITATIONS_DATA_TYPE,
                id=group.id,
                data={
                    'text_id': group.id,
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
    """`VercelAIAdapter` with a `CitedVercelAIEventStream`, and a `dump_messages` that shows what the stream showed.

    Late citations reach the UI; `dump_messages` strips citation markup as the stream does and keys this package's
    fingerprints to the parts `load_messages` makes.
    """

    @classmethod
    def dump_messages(
        cls,
        messages: Sequence[ModelMessage],
        *,
        generate_message_id: Callable[[ModelRequest | ModelResponse, Literal['system', 'user', 'assistant'], int], str]
        | None = None,
        sdk_version: Literal[5, 6, 7] = 5,
    ) -> list[UIMessage]:
        """`VercelAIAdapter.dump_messages`, with text as the stream sends it, and fingerprints that stay true.

        A UI text part holds consecutive text parts joined (Anthropic and Bedrock answer in several). Its text is
        without citation markup, stripped as that one text (as `CitedVercelAIEventStream` sends it, so history loaded
        into the UI shows what the stream showed), and its citations (`providerMetadata.pydantic_ai.citations`) are
        anchored on that text; one whose anchor covered nothing but markup keeps its sources, without an anchor. The
        UI text part loads back as one text part, while the fingerprints in `UIMessage.metadata`
        (`ModelResponse.metadata['pydantic_ai_citations']`) are keyed by part index: they are re-keyed to the parts
        `load_messages` makes (`joined_fingerprint`), on the text as shown, so an unedited round trip reports nothing
        stale, and text edited in the browser is found stale and realigned (or cleared) by `CleanStaleCitations` and
        `CitedAnswer`. A part edited on the server since it was fingerprinted (outside `edit_text`) is shown with its
        citations realigned, as `CitedAnswer` shows it, and stays reported as stale when it comes back.
        """
        require_messages(messages, where='CitedVercelAIAdapter.dump_messages')
        # A part edited since it was fingerprinted is shown as `CitedAnswer` shows it: its citations realigned.
        shown = [shown_response(m) if isinstance(m, ModelResponse) else m for m in messages]
        dumped = super().dump_messages(shown, generate_message_id=generate_message_id, sdk_version=sdk_version)
        # One assistant UI message per response that has a part the UI shows, in order.
        responses = iter(m for m in messages if isinstance(m, ModelResponse) and any(map(_shown, m.parts)))
        return [_rekeyed(ui, next(responses, None)) if ui.role == 'assistant' else ui for ui in dumped]

    @classmethod
    def load_messages(cls, messages: Sequence[UIMessage]) -> list[ModelMessage]:
        """`VercelAIAdapter.load_messages`, with each response of a streamed run of several given its fingerprints.

        The AI SDK holds a run of several responses as one UI message, which loads as those responses with the
        message's metadata on the first: the fingerprints `CitedVercelAIEventStream` sent for each of them
        (`STEPS_METADATA_KEY`) are put on each, so an edit in the browser is found in any of them.
        """
        require_ui_messages('CitedVercelAIAdapter.load_messages', messages, (UIMessage,), 'the AI SDK `UIMessage`s')
        loaded = super().load_messages(messages)
        _spread_steps(loaded, messages)
        return loaded

    def build_event_stream(self) -> UIEventStream[RequestData, BaseChunk, AgentDepsT, OutputDataT]:
        """Build the citation-aware Vercel AI event stream."""
        return CitedVercelAIEventStream(
            self.run_input,
            accept=self.accept,
            sdk_version=self.sdk_version,
            server_message_id=self.server_message_id,
            manage_system_prompt=self.manage_system_prompt,
        )

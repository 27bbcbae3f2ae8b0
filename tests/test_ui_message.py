"""The assistant message `useChat` builds from a data stream (`ui._vercel_message`: the stream fingerprints it, the seam check sends it back)."""

from __future__ import annotations

from pydantic_ai.ui.vercel_ai.request_types import (
    DataUIPart,
    DynamicToolInputAvailablePart,
    DynamicToolOutputAvailablePart,
    DynamicToolOutputErrorPart,
    FileUIPart,
    ReasoningUIPart,
    SourceDocumentUIPart,
    SourceUrlUIPart,
    StepStartUIPart,
    TextUIPart,
    ToolInputAvailablePart,
    ToolOutputAvailablePart,
    ToolOutputErrorPart,
)
from pydantic_ai.ui.vercel_ai.response_types import (
    BaseChunk,
    DataChunk,
    FileChunk,
    FinishChunk,
    MessageMetadataChunk,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningStartChunk,
    SourceDocumentChunk,
    SourceUrlChunk,
    StartChunk,
    StartStepChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolInputAvailableChunk,
    ToolInputStartChunk,
    ToolOutputAvailableChunk,
    ToolOutputErrorChunk,
)

from pydantic_ai_citations.ui import CITATIONS_DATA_TYPE
from pydantic_ai_citations.ui._vercel_message import ui_message_of  # pyright: ignore[reportPrivateUsage]

CITES = [{'sources': [{'url': 'https://k2.example/'}]}]


def test_parts_in_stream_order_with_their_end_metadata_and_late_citations():
    chunks: list[BaseChunk] = [
        StartChunk(message_id='m1', message_metadata={'a': 1}),
        StartStepChunk(),
        ReasoningStartChunk(id='r'),
        ReasoningDeltaChunk(id='r', delta='hm'),
        ReasoningEndChunk(id='r'),
        TextStartChunk(id='t'),
        TextDeltaChunk(id='t', delta='K2 '),
        TextDeltaChunk(id='t', delta='is tall.'),
        TextEndChunk(id='t', provider_metadata={'pydantic_ai': {'provider_name': 'x'}}),
        SourceUrlChunk(source_id='s', url='https://k2.example/', title='K2'),
        SourceDocumentChunk(source_id='d', media_type='text/plain', title='Notes', filename='n.txt'),
        FileChunk(url='data:text/plain;base64,SGk=', media_type='text/plain'),
        DataChunk(type=CITATIONS_DATA_TYPE, id='t', data={'text_id': 't', 'citations': CITES}),
        DataChunk(type=CITATIONS_DATA_TYPE, id='t', data={'text_id': 't', 'citations': CITES * 2}),  # replaces it
        DataChunk(type='data-other', data={'x': 1}),
        DataChunk(type='data-gone', data={}, transient=True),
        DataChunk(type=CITATIONS_DATA_TYPE, id='nowhere', data={'text_id': 'nowhere', 'citations': []}),
        MessageMetadataChunk(message_metadata={'b': 2}),
        FinishChunk(message_metadata={'c': 3}),
    ]
    message = ui_message_of(chunks)
    assert message.id == 'm1'
    assert message.metadata == {'a': 1, 'b': 2, 'c': 3}
    step, reasoning, text, url, document, file, data, other, nowhere = message.parts
    assert isinstance(step, StepStartUIPart)
    assert reasoning == ReasoningUIPart(text='hm', state='done')
    assert text == TextUIPart(
        text='K2 is tall.',
        state='done',
        provider_metadata={'pydantic_ai': {'provider_name': 'x', 'citations': CITES * 2}},
    )
    assert url == SourceUrlUIPart(source_id='s', url='https://k2.example/', title='K2')
    assert document == SourceDocumentUIPart(source_id='d', media_type='text/plain', title='Notes', filename='n.txt')
    assert file == FileUIPart(media_type='text/plain', url='data:text/plain;base64,SGk=')
    assert isinstance(data, DataUIPart) and data.data == {'text_id': 't', 'citations': CITES * 2}
    assert isinstance(other, DataUIPart) and other.type == 'data-other'
    assert isinstance(nowhere, DataUIPart)  # a late-citations chunk for no text part is kept as data, merged nowhere


def test_metadata_that_is_not_a_dict_replaces():
    message = ui_message_of([MessageMetadataChunk(message_metadata={'a': 1}), MessageMetadataChunk(message_metadata=7)])
    assert message.metadata == 7
    assert ui_message_of([]).metadata is None


def test_tool_calls_go_through_their_states():
    meta = {'pydantic_ai': {'provider_name': 'x'}}
    chunks: list[BaseChunk] = [
        ToolInputStartChunk(tool_call_id='a', tool_name='lookup'),
        ToolInputAvailableChunk(tool_call_id='a', tool_name='lookup', input={'q': 1}, provider_metadata=meta),
        ToolOutputAvailableChunk(tool_call_id='a', output='data'),
        ToolInputAvailableChunk(tool_call_id='b', tool_name='lookup', input={}),
        ToolOutputErrorChunk(tool_call_id='b', error_text='boom'),
        ToolInputAvailableChunk(tool_call_id='c', tool_name='pending', input={}),
        ToolInputAvailableChunk(tool_call_id='d', tool_name='dyn', input={}, dynamic=True),
        ToolInputAvailableChunk(tool_call_id='e', tool_name='dyn', input={}, dynamic=True),
        ToolOutputAvailableChunk(tool_call_id='d', output=1, dynamic=True),
        ToolOutputErrorChunk(tool_call_id='e', error_text='no', dynamic=True),
        ToolInputAvailableChunk(tool_call_id='f', tool_name='dyn', input={}, dynamic=True),
    ]
    done, failed, pending, dyn_done, dyn_failed, dyn_pending = ui_message_of(chunks).parts
    assert done == ToolOutputAvailablePart(
        type='tool-lookup', tool_call_id='a', input={'q': 1}, output='data', call_provider_metadata=meta
    )
    assert failed == ToolOutputErrorPart(type='tool-lookup', tool_call_id='b', input={}, error_text='boom')
    assert pending == ToolInputAvailablePart(type='tool-pending', tool_call_id='c', input={})
    assert dyn_done == DynamicToolOutputAvailablePart(tool_name='dyn', tool_call_id='d', input={}, output=1)
    assert dyn_failed == DynamicToolOutputErrorPart(tool_name='dyn', tool_call_id='e', input={}, error_text='no')
    assert dyn_pending == DynamicToolInputAvailablePart(tool_name='dyn', tool_call_id='f', input={})

"""Recording replay: real recorded (or hand-written) provider responses served to Pydantic AI's real model classes.

Private home of what `pydantic_ai_citations.testing` (`load_recording`, `replay_recording`) and
`pydantic_ai_citations.matrix` (the wire fixtures) both use: reading recordings (`_recording`), building the model
class over an offline transport (`_build`) and the AWS event-stream framing (`_eventstream`).
"""

from ._build import (
    ReplayModel,
    ReplayTransport,
    TappedModel,
    anthropic_tap_for,
    build_model,
    cohere_tap_for,
    copy_settings,
    httpx2_client,
    mistral_tap_for,
    mock_transport,
    perplexity_tap_for,
    sharing_sdk_setup,
)
from ._eventstream import EventStreamFormatError, EventStreamFrame, decode_event_stream, encode_event_stream
from ._recording import (
    ENDPOINT_PATHS,
    NAMED_SSE_APIS,
    RawResponse,
    Recording,
    RecordingApi,
    RecordingError,
    RecordingLayout,
    load_recording,
    render_stream,
    replay_recording,
    xai_chunks_from_json,
    xai_response_from_json,
)

__all__ = (
    'ENDPOINT_PATHS',
    'NAMED_SSE_APIS',
    'EventStreamFormatError',
    'EventStreamFrame',
    'RawResponse',
    'Recording',
    'RecordingApi',
    'RecordingError',
    'RecordingLayout',
    'ReplayModel',
    'ReplayTransport',
    'TappedModel',
    'build_model',
    'anthropic_tap_for',
    'cohere_tap_for',
    'copy_settings',
    'decode_event_stream',
    'encode_event_stream',
    'httpx2_client',
    'mistral_tap_for',
    'load_recording',
    'mock_transport',
    'perplexity_tap_for',
    'render_stream',
    'replay_recording',
    'sharing_sdk_setup',
    'xai_chunks_from_json',
    'xai_response_from_json',
)

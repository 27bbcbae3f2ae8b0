"""Recordings and live models given to the matrix that cannot be used are listed with a reason the user can act on."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest
import yaml

from pydantic_ai_citations.matrix import build_matrix


def test_recording_whose_sdk_is_missing_names_the_extra_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / 'cohere.yaml'
    body: dict[str, object] = {'id': 'r', 'finish_reason': 'COMPLETE', 'message': {'role': 'assistant', 'content': []}}
    interaction = {
        'request': {'method': 'POST', 'uri': 'https://api.cohere.com/v2/chat', 'body': '{"model": "command-a"}'},
        'response': {
            'status': {'code': 200},
            'headers': {'content-type': ['application/json']},
            'body': {'string': json.dumps(body)},
        },
    }
    path.write_text(yaml.safe_dump({'interactions': [interaction]}))
    monkeypatch.setitem(sys.modules, 'cohere', None)  # `import cohere` raises ModuleNotFoundError
    matrix = anyio.run(lambda: build_matrix(probes=False, recordings=[path]))
    assert [(f.source, f.reason) for f in matrix.unusable_inputs] == [
        (str(path), 'needs the \'cohere\' package: pip install "pydantic-ai-citations[cohere]" (or [all])')
    ]


def test_live_cohere_needs_the_variable_pydantic_ai_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    # Pydantic AI's Cohere provider reads only `CO_API_KEY`: another spelling is not taken for a key.
    monkeypatch.delenv('CO_API_KEY', raising=False)
    monkeypatch.setenv('COHERE_API_KEY', 'not-used')
    matrix = anyio.run(lambda: build_matrix(probes=False, live=['cohere:command-a-03-2025']))
    [failure] = matrix.unusable_inputs
    assert (failure.source, failure.reason) == ('cohere:command-a-03-2025', 'skipped: CO_API_KEY not set')


def test_live_model_the_provider_cannot_build_is_unusable_with_its_message(monkeypatch: pytest.MonkeyPatch) -> None:
    # The key the matrix checks is set, but the provider cannot be built from it: its own message is the reason.
    monkeypatch.setenv('AWS_ACCESS_KEY_ID', 'AKIA-not-used')
    for name in ('AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN', 'AWS_PROFILE'):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv('AWS_CONFIG_FILE', '/nonexistent')
    monkeypatch.setenv('AWS_SHARED_CREDENTIALS_FILE', '/nonexistent')
    model = 'bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0'
    matrix = anyio.run(lambda: build_matrix(probes=False, live=[model]))
    [failure] = matrix.unusable_inputs
    assert failure.source == model
    assert failure.reason == 'PartialCredentialsError: Partial credentials found in env, missing: AWS_SECRET_ACCESS_KEY'

"""Which provider API a Pydantic AI model talks to.

`Model.system` names the provider family (`'openai'` for both OpenAI APIs), so the API is read from the model's
class (walking its MRO by name, so provider SDKs that are not installed are never imported) and, for
OpenAI-compatible endpoints, from its base URL (Perplexity speaks both OpenAI wire formats).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast, get_args

from pydantic_ai.models import Model

__all__ = (
    'API_LABELS',
    'API_TITLES',
    'PROVIDER_APIS',
    'ApiLabel',
    'ModelInfo',
    'ProviderApi',
    'describe_model',
    'family_title',
    'model_family',
)

ProviderApi = Literal[
    'anthropic-messages',
    'bedrock-converse',
    'openai-responses',
    'openai-chat',
    'openrouter',
    'google-gemini',
    'google-vertex',
    'xai',
    'perplexity-agent',
    'perplexity-sonar',
    'mistral',
    'cohere',
    'groq',
]
"""The provider APIs this package knows: the one list that wire accounting, replay and the matrix rows derive from."""

ApiLabel = Literal[ProviderApi, 'other']
"""Provider APIs this package tells apart, and `'other'` for any model it does not know."""

PROVIDER_APIS: tuple[ProviderApi, ...] = get_args(ProviderApi)
API_LABELS: tuple[ApiLabel, ...] = (*PROVIDER_APIS, 'other')

API_TITLES: dict[ApiLabel, str] = {
    'anthropic-messages': 'Anthropic Messages',
    'bedrock-converse': 'Bedrock Converse',
    'openai-responses': 'OpenAI Responses',
    'openai-chat': 'OpenAI Chat Completions',
    'openrouter': 'OpenRouter',
    'google-gemini': 'Google Gemini API',
    'google-vertex': 'Google Vertex AI',
    'xai': 'xAI',
    'perplexity-agent': 'Perplexity Agent API',
    'perplexity-sonar': 'Perplexity Sonar (legacy chat)',
    'mistral': 'Mistral',
    'cohere': 'Cohere',
    'groq': 'Groq',
    'other': 'Other',
}
"""Each API's name for people (matrix rows)."""

_FAMILY_TITLES: dict[str, str] = {
    'anthropic': 'Anthropic Claude',
    'meta': 'Meta Llama',
    'amazon': 'Amazon Nova',
    'mistral': 'Mistral',
    'cohere': 'Cohere',
    'deepseek': 'DeepSeek',
    'openai': 'OpenAI gpt-oss',
    'qwen': 'Qwen',
    'writer': 'Writer',
    'ai21': 'AI21',
}
"""Model families of the APIs that serve several vendors' models, named for people (matrix rows)."""

_BEDROCK_GEO_PREFIXES = frozenset({'us', 'eu', 'apac', 'global', 'us-gov', 'jp', 'au', 'ca'})


def model_family(api: ApiLabel, model_name: str) -> str:
    """The model family behind `model_name` where citation support differs by model on one API, else `''`.

    Today that is Bedrock Converse: Anthropic models cite documents, other families do not (Pydantic AI's
    `bedrock_supports_citations` profile). The family is the vendor in the model id
    (`us.anthropic.claude-sonnet-4-5-...` -> `'anthropic'`, `meta.llama3-...` -> `'meta'`; ARNs read the same way).
    """
    if api != 'bedrock-converse':
        return ''
    parts = model_name.rsplit('/', 1)[-1].split('.')
    if parts[0] in _BEDROCK_GEO_PREFIXES:
        parts = parts[1:]
    return parts[0] if len(parts) > 1 else ''


def family_title(family: str) -> str:
    """A family (or `'via HOST'` for a gateway row) as people read it: `'anthropic'` -> `'Anthropic Claude'`."""
    return _FAMILY_TITLES.get(family, family)


_BY_CLASS: dict[str, ApiLabel] = {
    'OpenRouterModel': 'openrouter',
    'OpenAIResponsesModel': 'openai-responses',
    'OpenAIChatModel': 'openai-chat',
    'AnthropicModel': 'anthropic-messages',
    'BedrockConverseModel': 'bedrock-converse',
    'GoogleModel': 'google-gemini',
    'XaiModel': 'xai',
    'MistralModel': 'mistral',
    'CohereModel': 'cohere',
    'GroqModel': 'groq',
}


@dataclass(frozen=True)
class ModelInfo:
    """The model that served a request."""

    api: ApiLabel
    """The provider API (tells OpenAI Chat Completions from Responses, Gemini API from Vertex)."""
    system: str
    """`Model.system`: the provider family as Pydantic AI names it."""
    model_name: str
    """`Model.model_name`."""
    model_class: str
    """The model's class name."""


def describe_model(model: Model) -> ModelInfo:
    """Describe the model that serves a request: its provider API, system and name."""
    api: ApiLabel = 'other'
    label = getattr(model, 'api_label', None)  # scripted models (`CitingModel`) say which API they imitate
    if isinstance(label, str) and label in API_LABELS:
        api = label
    for cls in type(model).__mro__ if api == 'other' else ():
        if (found := _BY_CLASS.get(cls.__name__)) is not None:
            api = found
            break
    system = _attr(model, 'system')
    # (`base_url` is read only where it tells APIs apart: for most models it formats the client's URL each time.)
    if api == 'google-gemini' and ('vertex' in system or 'aiplatform' in _attr(model, 'base_url')):
        api = 'google-vertex'
    elif api in ('openai-responses', 'openai-chat') and 'perplexity' in _attr(model, 'base_url'):
        api = 'perplexity-agent' if api == 'openai-responses' else 'perplexity-sonar'
    return ModelInfo(api, system, _attr(model, 'model_name'), type(model).__name__)


def _attr(model: Model, name: str) -> str:
    try:
        value: object = getattr(model, name, '')
    except Exception:  # a model property that needs a live client must not break tracking
        return ''
    return value if isinstance(value, str) else ''


def describe_serving_model(model: Model, response_model_name: str | None, response_provider: str | None) -> ModelInfo:
    """Describe the model that actually answered, looking inside `FallbackModel`s and `WrapperModel`s.

    A `FallbackModel` serves a request with the first of its models that succeeds; the response names that model
    (`model_name`, `provider_name`), so the candidate it matches is the one that answered.
    """
    candidates = list(_leaves(model))
    if len(candidates) == 1:
        return describe_model(candidates[0])
    infos = [describe_model(m) for m in candidates]
    name = response_model_name or ''
    for matches in (
        [i for i in infos if name and i.model_name == name],
        [i for i in infos if name and i.model_name and name.startswith(i.model_name)],
        [i for i in infos if response_provider and i.system == response_provider],
    ):
        if len(matches) == 1:
            return matches[0]
    return describe_model(model)


def _leaves(model: Model, depth: int = 0) -> list[Model]:
    inner: object = getattr(model, 'models', None) if type(model).__name__ == 'FallbackModel' else None
    if depth < 10 and isinstance(inner, (list, tuple)):
        found: list[Model] = []
        for m in cast('Sequence[object]', inner):
            if isinstance(m, Model):
                found.extend(_leaves(m, depth + 1))  # pyright: ignore[reportUnknownArgumentType]
        return found
    wrapped: object = getattr(model, 'wrapped', None)
    if depth < 10 and isinstance(wrapped, Model):
        return _leaves(wrapped, depth + 1)  # pyright: ignore[reportUnknownArgumentType]
    return [model]

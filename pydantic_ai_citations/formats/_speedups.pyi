"""Types of the optional C scan loop (`_speedups.c`), used by `openai_markers.MarkerScanner`."""

from collections.abc import Callable
from typing import Any

from .._problems import CitationProblem
from .openai_markers import Marker

class Scanner:
    def __init__(
        self,
        families: frozenset[str],
        cache: dict[str, Any],
        problems: list[CitationProblem],
        parse: Callable[[str, frozenset[str], dict[str, Any]], Any],
        unterminated: Callable[[str, int, int], CitationProblem],
        malformed: Callable[[str, str, int], CitationProblem],
        closed_error: Callable[[str], Exception],
        marker_type: type[Marker],
    ) -> None: ...
    def feed(self, delta: str, /) -> list[Marker]: ...
    def close(self) -> None: ...

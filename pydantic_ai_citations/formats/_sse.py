"""The package's one decoder of server-sent events (SSE): bytes in, each event's `data` out.

Used for whole bodies (`sse_data`: recordings, wire accounting) and incrementally, chunk by chunk, as bytes flow
to an SDK (`SseDecoder`: the Perplexity tap). An event ends at a blank line; its `data:` lines are joined with
newlines (one space after the colon is dropped, as the SSE spec says); other fields (`event:`, `id:`, comments) are
ignored, and so is the `[DONE]` sentinel that ends Chat Completions streams. A last event without its blank line
is still returned by `flush()`.
"""

from __future__ import annotations

import json
from typing import cast

__all__ = ('MAX_JSON_DEPTH', 'JsonNestingError', 'SseDecoder', 'load_json', 'loads_bounded', 'sse_data')

MAX_JSON_DEPTH = 256
"""The deepest nesting of arrays and objects accepted in recorded or streamed JSON (real bodies stay under 30)."""


class SseDecoder:
    """Incremental SSE decoder; split-safe across chunks (a line or an event may arrive in pieces)."""

    def __init__(self) -> None:
        self._pieces: list[bytes] = []  # the last line so far, not ended yet
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        """Take the next bytes; return the `data` of every event they complete."""
        done: list[str] = []
        if b'\n' not in chunk:  # a line still arriving: kept in pieces, joined once its end comes
            self._pieces.append(chunk)
            return done
        buffer = b''.join((*self._pieces, chunk)) if self._pieces else chunk
        last = buffer.rfind(b'\n')
        self._pieces = [buffer[last + 1 :]] if last + 1 < len(buffer) else []
        # The chunk's complete lines are decoded and split in one go, in C. Cutting and decoding them line by line
        # took 1.5x as long on 80,000 events, and cutting the rest of a big chunk per line would be quadratic. The
        # UTF-8 decoder never takes a newline or carriage return into a sequence, valid or not, so decoding the lines
        # together gives what decoding each one does.
        for line in buffer[:last].decode('utf-8', errors='replace').split('\n'):
            line = line.rstrip('\r')
            if not line:
                self._dispatch(done)
            elif line.startswith('data:'):
                self._data.append(line[5:].removeprefix(' '))
        return done

    def flush(self) -> list[str]:
        """The body ended: return the `data` of an event that had no closing blank line."""
        done = self.feed(b'\n') if self._pieces else []
        self._dispatch(done)
        return done

    def _dispatch(self, done: list[str]) -> None:
        if not self._data:
            return
        data = '\n'.join(self._data)
        self._data = []
        if data.strip() != '[DONE]':
            done.append(data)


def sse_data(body: str | bytes) -> list[str]:
    """The `data` of every event in a whole SSE body, in order."""
    decoder = SseDecoder()
    data = decoder.feed(body.encode('utf-8') if isinstance(body, str) else body)
    return data + decoder.flush()


class JsonNestingError(ValueError):
    """JSON nested deeper than `MAX_JSON_DEPTH`: refused before anything recurses over it."""


def loads_bounded(data: str | bytes, *, max_depth: int = MAX_JSON_DEPTH) -> object:
    """`json.loads`, refusing nesting deeper than `max_depth` with `JsonNestingError` (a `ValueError`).

    Deep input never raises `RecursionError`, here or in the code that later walks the value.
    """
    try:
        value = json.loads(data)
    except RecursionError:
        raise JsonNestingError(f'JSON nested deeper than {max_depth} levels') from None
    if _depth_exceeds(value, max_depth):
        raise JsonNestingError(f'JSON nested deeper than {max_depth} levels')
    return value


def _depth_exceeds(value: object, max_depth: int) -> bool:
    """Whether `value` nests lists/dicts deeper than `max_depth` (iterative: no recursion of its own)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: list[object] = list(cast('dict[object, object]', item).values())
        elif isinstance(item, list):
            children = cast('list[object]', item)
        else:
            continue
        if depth > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def load_json(data: str) -> object | None:
    """An event's `data` decoded as JSON, or `None` when it is not JSON (or nested deeper than `MAX_JSON_DEPTH`)."""
    try:
        return loads_bounded(data)
    except ValueError:
        return None

"""Parsers for the citation formats Pydantic AI leaves raw. Each module is pure and reports what it could not resolve.

One verb per operation, in every module: `extract_*` finds markers in text, `resolve` (and `resolve_markers`) turns a
format's markers or raw citation into Pydantic AI `Citation`s, `recover_*` reads citations out of raw provider data
Pydantic AI kept, and `apply_*` fills `TextPart.citations` of a `ModelResponse` in place.
"""

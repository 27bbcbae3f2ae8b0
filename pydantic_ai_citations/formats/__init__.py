"""Parsers for the citation formats Pydantic AI leaves raw. Each module is pure and reports what it could not resolve.

One verb per operation, in every module: `extract_*` finds markers in text, `resolve` (and `resolve_markers`) turns a
format's markers or raw citation into Pydantic AI `Citation`s, `recover_*` reads citations out of raw provider data
Pydantic AI kept, and `apply_*` fills `TextPart.citations` of a `ModelResponse` in place. The one grammar for citation
markup in text (`formats.markup`) has two: `scan_markup` finds every kind of markup with its issues, `strip_markup`
removes it and returns the cut ranges (`strip_joined` for text parts read as one text, `StreamCleaner` for text that
arrives in pieces: both give what `strip_markup` gives for the whole text).
"""

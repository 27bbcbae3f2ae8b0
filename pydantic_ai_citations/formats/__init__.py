"""Parsers for the citation formats Pydantic AI leaves raw. Each module is pure and reports what it could not resolve."""

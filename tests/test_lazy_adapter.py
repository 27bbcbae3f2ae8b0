"""`lazy_adapter`: a module-level `TypeAdapter` that builds its schema at its first use, not at import."""

from __future__ import annotations

import subprocess
import sys

from pydantic import TypeAdapter

from pydantic_ai_citations import CitationProblem, CitedAnswer
from pydantic_ai_citations._lazy import lazy_adapter  # pyright: ignore[reportPrivateUsage]


def test_it_answers_as_the_adapter_it_stands_for():
    lazy: TypeAdapter[list[CitationProblem]] = lazy_adapter(list[CitationProblem])
    assert repr(lazy) == 'lazy_adapter(list[pydantic_ai_citations._problems.CitationProblem])'
    problems = [CitationProblem('stale_after_edit', 'changed', part_index=1)]
    eager = TypeAdapter(list[CitationProblem])
    assert lazy.dump_json(problems) == eager.dump_json(problems)
    assert lazy.validate_json(eager.dump_json(problems)) == problems
    assert lazy.json_schema() == eager.json_schema()


def test_importing_the_package_builds_no_adapter():
    """The adapters of every public name's module are built at their first use: a star import builds none."""
    code = (
        'from pydantic_ai_citations import *\n'
        'from pydantic_ai_citations import _answer, _observation, _problems, _json_markup\n'
        'adapters = [_answer.cited_answer_ta, _observation.cited_run_ta, _problems.problems_ta, '
        '_json_markup.removed_markup_ta]\n'
        'print([a._adapter is None for a in adapters])\n'
        'CitedAnswer("K2.").to_json()\n'
        'print(_answer.cited_answer_ta._adapter is not None)\n'
    )
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout.split('\n')
    assert out[:2] == ['[True, True, True, True]', 'True']
    assert CitedAnswer.from_json(CitedAnswer('K2.').to_json()) == CitedAnswer('K2.')

"""Build script for the optional C scan loop for citation markers.

Everything else is in `pyproject.toml`; setuptools still marks its `ext-modules` table there as experimental, so the
extension is declared here.

`optional=True`: without a C compiler the build goes on and the package uses its pure-Python loop (same results,
slower; see `pydantic_ai_citations/formats/_speedups.c`).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            'pydantic_ai_citations.formats._speedups',
            ['pydantic_ai_citations/formats/_speedups.c'],
            optional=True,
        )
    ]
)

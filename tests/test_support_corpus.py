"""The support check on 30 real, messy pages (`../shared/corpus/article-extraction-benchmark`, not in the repo)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from pydantic_ai_citations.support import PassageIndex, decode_body, split_passages

BENCH = 'article-extraction-benchmark'
# Ground-truth paragraphs split into sentences (test-side only: the package never splits HTML with regexes).
SENTENCE_END = re.compile(r'(?<=[.!?])\s+(?=[A-Z"“])')


def squash(text: str) -> str:
    """Compare without whitespace: the hand-checked ground truth spaces quotes and tags differently."""
    return ''.join(text.split())


def load(corpus: Path) -> list[tuple[str, str, list[str]]]:
    root = corpus / BENCH
    if not (root / 'ground-truth.json').is_file():
        pytest.skip(f'{root} has no ground-truth.json')
    truth = json.loads((root / 'ground-truth.json').read_text(encoding='utf-8'))
    pages: list[tuple[str, str, list[str]]] = []
    for key, entry in sorted(truth.items()):
        decoded = decode_body(gzip.decompress((root / 'html' / f'{key}.html.gz').read_bytes()), max_bytes=50_000_000)
        assert decoded.text is not None, key
        sentences = [
            ' '.join(s.split())
            for paragraph in entry['articleBody'].split('\n')
            for s in SENTENCE_END.split(paragraph)
            if len(s.split()) >= 6
        ]
        pages.append((key, decoded.text, sentences))
    return pages


def test_every_ground_truth_sentence_lands_in_exactly_one_passage(corpus: Path):
    pages = load(corpus)
    assert len(pages) == 30
    total = 0
    for key, html, sentences in pages:
        passages = [squash(p.text) for p in split_passages(html)]
        source = squash(html)
        for sentence in sentences:
            total += 1
            n = sum(squash(sentence) in p for p in passages)
            if n > 1:  # only when the page itself repeats the sentence (a pull quote, say)
                assert source.count(squash(sentence)[:40]) > 1, (key, sentence)
            else:
                assert n == 1, (key, sentence)
    assert total > 900


def test_a_claim_made_from_a_sentence_finds_its_passage(corpus: Path):
    found = 0
    total = 0
    for key, html, sentences in load(corpus):
        index = PassageIndex(split_passages(html))
        for sentence in sentences:
            total += 1
            match = index.best(sentence)
            assert match is not None, (key, sentence)
            assert match.score == 1.0, (key, sentence)
            assert 0 <= match.position <= 1
            found += squash(sentence) in squash(match.passage.text)
    # The rest tie with an earlier passage holding the same terms (a teaser, a summary, a repeated quote).
    assert found / total > 0.95, (found, total)

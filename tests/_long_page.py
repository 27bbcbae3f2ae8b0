"""A long page and a whole-answer claim against it, for the linear-time test and benchmark of the support check."""

from __future__ import annotations

import random
import string


def long_page_texts(n: int) -> tuple[list[str], str]:
    """`n` passages of 40 words and a claim of half the words of every 16th passage.

    About a third of each passage's words are stop words, the rest come from a vocabulary of 1,000 words per 250
    passages (a long page moves on to new topics: twice the page is twice the same kind of text).
    """
    rng = random.Random(n)
    texts: list[str] = []
    common = ['the', 'of', 'and', 'in', 'to', 'was', 'is', 'for']
    for block in range(0, n, 250):
        head = string.ascii_lowercase[block // 250 // 26 % 26] + string.ascii_lowercase[block // 250 % 26]
        vocabulary = [head + ''.join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 7))) for _ in range(1000)]
        texts += [
            ' '.join(rng.choice(common) if rng.random() < 0.3 else rng.choice(vocabulary) for _ in range(40))
            for _ in range(min(250, n - block))
        ]
    claim = ' '.join(' '.join(w for w in texts[i].split() if rng.random() < 0.5) for i in range(0, n, 16))
    return texts, claim

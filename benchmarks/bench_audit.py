"""The audit on Dask (issue 16): 20,000 logged answers over the 30 shared real pages, in process and on 2 workers.

Pages: the 30 real pages of `../shared/corpus/article-extraction-benchmark` (not in the repository), put in a
`SnapshotStore` in a temporary folder. Answers are generated at run time, seeded: one to three claims each, every
claim a sentence of a page's hand-checked article text, a third of them with 30-50 % of the words dropped and one in
ten citing the wrong page; each claim cites its page by a content anchor. They are written as JSON Lines.

- *single process*: `audit_answers(path, store, out)` in a fresh interpreter (its peak RSS is the process's own);
- *Dask*: the same call with a `distributed.Client` on a `LocalCluster` of 2 worker processes, started and warmed
  before the clock starts (a cluster is started once and serves many audits).

Acceptance: the JSON Lines outputs are byte-identical and the summaries equal; Dask throughput >= 1.6x the single
process's; the single process's peak memory (VmHWM) at 2x and 4x the answers is within 15 % of its peak at 1x (the
answers are `ANSWERS / 4`, `/ 2` and all of them, so the largest run is the timed one). Memory is bounded by the
partition, not by the answers: the peak is the largest partition's working set, which varies a little with the pages
its answers cite, so it creeps up by that spread over more partitions and then stays. `AUDIT_BENCH_ANSWERS` changes the
number of answers (default 20,000) for a quick look; the acceptance figures are for the default. CPU seconds are
printed too: on a busy machine the wall-clock ratio depends on the other load, the CPU times do not.
"""

from __future__ import annotations

import filecmp
import gzip
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from pydantic_ai_citations._answer import CitedAnswer, CitedSpan, SourceRef
from pydantic_ai_citations.support import PageSnapshot, SnapshotStore, audit_answers, decode_body

ROOT = Path(__file__).resolve().parents[1].parent / 'shared' / 'corpus' / 'article-extraction-benchmark'
ANSWERS = int(os.environ.get('AUDIT_BENCH_ANSWERS', '20000'))
PARTITION = 1_000
WORKERS = 2
TARGET_SPEEDUP = 1.6
MEMORY_SLACK = 0.15  # the peak is the largest partition's working set: it varies a little with the pages cited
# Ground-truth paragraphs split into sentences (benchmark-side only: the package never splits HTML with regexes).
SENTENCE_END = re.compile(r'(?<=[.!?])\s+(?=[A-Z"“])')

# Peak RSS of this process: VmHWM (ru_maxrss would include the parent's peak, since Linux keeps it across exec).
PEAK = """
def peak_mib():
    try:
        with open('/proc/self/status') as status:
            return next(int(line.split()[1]) for line in status if line.startswith('VmHWM:')) / 1024
    except OSError:
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
"""

SINGLE = (
    PEAK
    + """
import json, sys, time
from pydantic_ai_citations.support import SnapshotStore, audit_answers
from pydantic_ai_citations.support._report import SupportSummary
from pydantic import TypeAdapter
source, store, target, partition = sys.argv[1:5]
start, cpu = time.perf_counter(), time.process_time()
with open(target, 'w', encoding='utf-8') as out:
    result = audit_answers(source, SnapshotStore(store), out, partition_size=int(partition))
seconds = time.perf_counter() - start
print(json.dumps({
    'seconds': seconds,
    'cpu': time.process_time() - cpu,
    'answers': result.answers,
    'peak_mib': peak_mib(),
    'summary': TypeAdapter(SupportSummary).dump_python(result.summary, mode='json'),
}))
"""
)


def load_pages() -> list[tuple[str, str, list[str]]]:
    if not (ROOT / 'ground-truth.json').is_file():
        pytest.skip(f'{ROOT} has no ground-truth.json (CI places ../shared beside the checkout)')
    truth = json.loads((ROOT / 'ground-truth.json').read_text(encoding='utf-8'))
    pages: list[tuple[str, str, list[str]]] = []
    for key, entry in sorted(truth.items()):
        decoded = decode_body(gzip.decompress((ROOT / 'html' / f'{key}.html.gz').read_bytes()), max_bytes=50_000_000)
        assert decoded.text is not None, key
        sentences = [
            ' '.join(s.split())
            for paragraph in entry['articleBody'].split('\n')
            for s in SENTENCE_END.split(paragraph)
            if 16 <= len(s.split()) <= 45  # claims of at least 8 words after dropping half of them
        ]
        pages.append((f'https://corpus.test/{key[:16]}', decoded.text, sentences))
    assert len(pages) == 30
    return pages


def make_answer(rng: random.Random, pages: list[tuple[str, str, list[str]]]) -> CitedAnswer:
    claims: list[tuple[str, str]] = []
    for _ in range(rng.choice((1, 2, 2, 3))):
        url, _, sentences = rng.choice(pages)
        words = rng.choice(sentences).split()
        if rng.random() < 1 / 3:
            gone = set(rng.sample(range(1, len(words)), round(rng.uniform(0.3, 0.5) * len(words))))
            words = [w for i, w in enumerate(words) if i not in gone]
        if rng.random() < 0.1:
            url = rng.choice(pages)[0]  # cites the wrong page
        claims.append((' '.join(words), url))
    numbers: dict[str, int] = {}
    spans: list[CitedSpan] = []
    offset = 0
    for i, (claim, url) in enumerate(claims):
        number = numbers.setdefault(url, len(numbers) + 1)
        spans.append(
            CitedSpan(offset, offset + len(claim), 'content', [number], message_index=0, part_index=0, citation_index=i)
        )
        offset += len(claim) + 1
    sources = [SourceRef(n, 'web', url=url) for url, n in numbers.items()]
    return CitedAnswer(' '.join(c for c, _ in claims), spans=spans, sources=sources, provider_name='bench')


def single_process(source: Path, store: Path, target: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, '-c', SINGLE, str(source), str(store), str(target), str(PARTITION)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def test_dask_audit_is_identical_faster_and_memory_bounded(benchmark: BenchmarkFixture, tmp_path: Path):
    from distributed import Client, LocalCluster
    from pydantic import TypeAdapter

    from pydantic_ai_citations.support import SupportSummary

    pages = load_pages()
    store_path = tmp_path / 'snapshots.sqlite'
    SnapshotStore(store_path).put_many(PageSnapshot.from_text(url, html) for url, html, _ in pages)
    rng = random.Random('audit-bench')
    lines = [make_answer(rng, pages).to_json().decode() + '\n' for _ in range(ANSWERS)]
    sizes = {'1x': ANSWERS // 4, '2x': ANSWERS // 2, '4x': ANSWERS}
    for name, size in sizes.items():
        (tmp_path / f'answers-{name}.jsonl').write_text(''.join(lines[:size]), encoding='utf-8')
    del lines
    source = tmp_path / 'answers-4x.jsonl'

    runs = {
        name: single_process(tmp_path / f'answers-{name}.jsonl', store_path, tmp_path / f'single-{name}.jsonl')
        for name in sizes
    }
    single = runs['4x']

    with (
        LocalCluster(n_workers=WORKERS, threads_per_worker=1, processes=True, dashboard_address=':0') as cluster,
        Client(cluster) as client,
    ):
        with (tmp_path / 'warm.jsonl').open('w', encoding='utf-8') as out:  # workers import and cache once
            audit_answers(
                tmp_path / 'answers-1x.jsonl', SnapshotStore(store_path), out, partition_size=50, client=client
            )

        def on_dask() -> tuple[float, object]:
            start = time.perf_counter()
            with (tmp_path / 'dask.jsonl').open('w', encoding='utf-8') as out:
                result = audit_answers(source, SnapshotStore(store_path), out, partition_size=PARTITION, client=client)
            return time.perf_counter() - start, result

        workers_cpu, driver_cpu = client.run(time.process_time), time.process_time()
        dask_seconds, result = benchmark.pedantic(on_dask, rounds=1, iterations=1)
        driver_cpu = time.process_time() - driver_cpu
        workers_cpu = {k: v - workers_cpu[k] for k, v in client.run(time.process_time).items()}
        namespace: dict[str, object] = {}
        exec(PEAK, namespace)
        worker_peaks = client.run(namespace['peak_mib'])

    assert filecmp.cmp(tmp_path / 'single-4x.jsonl', tmp_path / 'dask.jsonl', shallow=False)
    summary_ta = TypeAdapter(SupportSummary)
    assert summary_ta.dump_python(result.summary, mode='json') == single['summary']  # type: ignore[attr-defined]
    single_rate = ANSWERS / float(single['seconds'])  # type: ignore[arg-type]
    dask_rate = ANSWERS / dask_seconds
    speedup = dask_rate / single_rate
    peaks = {name: float(run['peak_mib']) for name, run in runs.items()}  # type: ignore[arg-type]
    growth = max(peaks['2x'], peaks['4x']) / peaks['1x'] - 1
    # CPU seconds do not depend on what else the machine runs: the speed-up the same work would reach with one idle
    # core per worker (the busiest worker's CPU time against the single process's).
    single_cpu = float(single['cpu'])  # type: ignore[arg-type]
    projected = single_cpu / max(workers_cpu.values())
    load = os.getloadavg()
    benchmark.extra_info.update(
        {
            'answers': ANSWERS,
            'single_answers_per_s': round(single_rate, 1),
            'dask_answers_per_s': round(dask_rate, 1),
            'speedup': round(speedup, 2),
            'peak_mib': {k: round(v, 1) for k, v in peaks.items()},
            'worker_peak_mib': {k: round(v, 1) for k, v in worker_peaks.items()},
            'load_average': load,
            'single_cpu_s': round(single_cpu, 1),
            'workers_cpu_s': {k: round(v, 1) for k, v in workers_cpu.items()},
            'driver_cpu_s': round(driver_cpu, 1),
            'projected_speedup_on_idle_cores': round(projected, 2),
        }
    )
    print(
        f'\naudit: {ANSWERS} answers, {result.summary.checks} citation checks; '  # type: ignore[attr-defined]
        f'single process {float(single["seconds"]):.1f} s ({single_rate:.0f} answers/s), '  # type: ignore[arg-type]
        f'Dask {WORKERS} workers {dask_seconds:.1f} s ({dask_rate:.0f} answers/s): {speedup:.2f}x; outputs identical'
    )
    print(
        'peak RSS of the single process: '
        + ', '.join(f'{name} ({sizes[name]} answers) {mib:.0f} MiB' for name, mib in peaks.items())
        + f'; growth {growth:+.1%}; Dask workers '
        + ', '.join(f'{mib:.0f}' for mib in worker_peaks.values())
        + f' MiB; load average {load[0]:.1f} on {os.cpu_count()} cores'
    )
    print(
        f'CPU: single process {single_cpu:.1f} s; Dask workers '
        + ' + '.join(f'{v:.1f}' for v in workers_cpu.values())
        + f' s, driver {driver_cpu:.1f} s: {projected:.2f}x on {WORKERS} idle cores'
    )
    assert growth <= MEMORY_SLACK, f'peak memory grew {growth:.1%} from 1x to 4x the answers'
    assert speedup >= TARGET_SPEEDUP, f'Dask on {WORKERS} workers is only {speedup:.2f}x the single process'

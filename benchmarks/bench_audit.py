"""The audit on Dask (issue 16): 20,000 logged answers over the 30 shared real pages, in process and on 2 workers.

Pages: the 30 real pages of `../shared/corpus/article-extraction-benchmark` (not in the repository), put in a
`SnapshotStore` in a temporary folder. Answers are generated at run time, seeded: one to three claims each, every
claim a sentence of a page's hand-checked article text, a third of them with 30-50 % of the words dropped and one in
ten citing the wrong page; each claim cites its page by a content anchor. They are written as JSON Lines.

Each run is a fresh interpreter that imports, warms up on a small audit (imports, lazy set-up: none of it is cached
between audits) and then times `audit_answers(path, store, out)` with the package's default partition size:

- *single process*: in that interpreter;
- *Dask*: with a `distributed.Client` on the local cluster `--workers 2` starts (2 worker processes of one thread, no
  dashboard and so no worker profiler), started before the clock starts (a cluster is started once and serves many
  audits; its start-up time is printed, not counted).

Throughput is answers per wall-clock second of the timed call: what a user waits for. The machine has 2 cores shared
with other work, so a single-process run and a Dask run are timed back to back, `ROUNDS` times, and each pair gives a
ratio; which of the two goes first alternates from pair to pair, so a host that speeds up or slows down during the
measure favours neither. Each run also measures the CPU time the rest of the machine used meanwhile (`/proc/stat` less the run's own
processes), in cores. The speed-up asserted (>= 1.6x) is the median over the *quiet* pairs, where other processes
used under `QUIET` cores during both runs; every pair is printed with its times, that figure and the load average
before it, and with no quiet pair the speed-up is printed but not judged (the test is skipped). Why: Linux shares the
CPU between sessions (autogroup) before processes, so while any other session keeps a core busy, the Dask run's three
processes together get about the one core the single process gets, and the ratio is near 1x whatever the code does.

Before each pair, two copies of a plain pure-Python loop run at once and their throughput over one copy's is
printed (`two_loops`): a sample of what the host gave two processes then (context, like the CPU seconds).

CPU seconds are printed as context, not as the measure. They leave out waiting (idle workers at the end, hand-offs)
and the driver's share of the 2 cores, and on this virtual machine they are not load-free either: the same partitions
take 10-20 % more CPU time while other processes run. The "idle-core" projection is the single run's CPU time over the
larger of the busiest worker's CPU time and half the CPU time of workers and driver together.

Acceptance: the JSON Lines outputs are byte-identical and the summaries equal; Dask throughput >= 1.6x the single
process's (median of the pairs); peak memory (VmHWM) of the single process and of the Dask driver and workers after
2x and 4x the answers is within 15 % of the peak after 1x. In the first round each interpreter audits `ANSWERS`,
then twice and four times as many (more generated answers, all different, the first `ANSWERS` the same), and that
first audit is the first pair's timed one. Memory is bounded by the partitions in flight and the page cache (each
page is split again after `PAGE_USES` claims), not by the answers. `AUDIT_BENCH_ANSWERS` changes the number of
answers (default 20,000) and `AUDIT_BENCH_ROUNDS` the pairs (default 5) for a quick look; the acceptance figures are
for the defaults.
"""

from __future__ import annotations

import filecmp
import gzip
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from pydantic_ai_citations._answer import CitedAnswer, CitedSpan, SourceRef
from pydantic_ai_citations.support import PageSnapshot, SnapshotStore, decode_body

ROOT = Path(__file__).resolve().parents[1].parent / 'shared' / 'corpus' / 'article-extraction-benchmark'
ANSWERS = int(os.environ.get('AUDIT_BENCH_ANSWERS', '20000'))
ROUNDS = int(os.environ.get('AUDIT_BENCH_ROUNDS', '5'))
WORKERS = 2
TARGET_SPEEDUP = 1.6
QUIET = 0.15  # cores used by other processes during both runs of a pair, at most, for the pair to be judged
MEMORY_SLACK = 0.15  # the peak is the largest partition's working set: it varies a little with the pages cited
# Ground-truth paragraphs split into sentences (benchmark-side only: the package never splits HTML with regexes).
SENTENCE_END = re.compile(r'(?<=[.!?])\s+(?=[A-Z"“])')

# One run: `single` or `dask`, the number of Dask workers, the store, where outputs go, then the answer files, audited in turn (the last is timed
# for throughput; the peak memory after each is reported). Prints one JSON object.
RUN = """
import json, os, sys, time
from pydantic import TypeAdapter
from pydantic_ai_citations.support import SnapshotStore, SupportSummary, audit_answers

def peak_mib():
    # VmHWM: this process's own peak (ru_maxrss would include the parent's, since Linux keeps it across exec).
    with open('/proc/self/status') as status:
        return next(int(line.split()[1]) for line in status if line.startswith('VmHWM:')) / 1024

def busy_seconds():
    # CPU time the whole machine spent running anything (user, nice, system, irq, softirq), in seconds.
    with open('/proc/stat') as stat:
        v = [int(x) for x in stat.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / os.sysconf('SC_CLK_TCK')

def main(mode, workers, store_path, out_dir, warm, *sources):
    store = SnapshotStore(store_path)
    client = cluster = None
    started = time.perf_counter()
    if mode == 'dask':
        from distributed import Client
        from pydantic_ai_citations.support._dask import local_cluster
        cluster = local_cluster(int(workers))  # the cluster `audit_answers(workers=2)` and `--workers 2` start
        client = Client(cluster)
    startup = time.perf_counter() - started
    try:
        with open(os.path.join(out_dir, f'{mode}-warm.jsonl'), 'w', encoding='utf-8') as out:
            audit_answers(warm, store, out, partition_size=50, client=client)  # a few partitions: every worker warms
        runs = []
        for source in sources:
            load = os.getloadavg()[0]
            workers = client.run(time.process_time) if client else {}
            start, cpu, busy = time.perf_counter(), time.process_time(), busy_seconds()
            target = os.path.join(out_dir, f'{mode}-{os.path.basename(source)}')
            with open(target, 'w', encoding='utf-8') as out:
                result = audit_answers(source, store, out, client=client)
            seconds, cpu, busy = time.perf_counter() - start, time.process_time() - cpu, busy_seconds() - busy
            workers = {k: v - workers[k] for k, v in client.run(time.process_time).items()} if client else {}
            others = max(0.0, busy - cpu - sum(workers.values())) / seconds  # cores used by other processes
            runs.append({
                'source': source, 'answers': result.answers, 'seconds': seconds, 'cpu': cpu, 'load': load,
                'others': others,
                'workers_cpu': list(workers.values()), 'peak_mib': peak_mib(),
                'worker_peak_mib': list(client.run(peak_mib).values()) if client else [],
                'summary': TypeAdapter(SupportSummary).dump_python(result.summary, mode='json'),
            })
        print(json.dumps({'startup': startup, 'runs': runs}))
    finally:
        if client is not None:
            client.close()
            cluster.close()

if __name__ == '__main__':
    main(*sys.argv[1:])
"""


LOOP = 'n = 0\nfor i in range(6_000_000):\n    n += i % 7\n'
"""A plain pure-Python loop (about half a second), for what the host gives two processes at once."""


def two_loops() -> float:
    """Two copies of `LOOP` at once, as throughput over one copy alone: 2.0 when the host gives two whole cores.

    Printed beside each pair, not judged: it samples what the host gave two processes for a second or so. On this
    virtual machine, with nothing else running inside it, it ranged from 1.38x to 2.24x within minutes: the host's
    share moves as fast as the pairs do, so one sample does not predict the pair after it.
    """
    command = [sys.executable, '-c', LOOP]
    start = time.perf_counter()
    subprocess.run(command, check=True)
    one = time.perf_counter() - start
    start = time.perf_counter()
    for process in [subprocess.Popen(command) for _ in range(2)]:
        process.wait()
    return 2 * one / (time.perf_counter() - start)


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


Run = dict[str, object]


def audit_in(mode: str, tmp_path: Path, store: Path, sources: list[Path]) -> tuple[float, list[Run]]:
    """Start a fresh interpreter that audits `sources` in turn (`mode` 'single' or 'dask'): start-up time and runs."""
    done = subprocess.run(
        [
            sys.executable,
            '-c',
            RUN,
            mode,
            str(WORKERS),
            str(store),
            str(tmp_path),
            str(tmp_path / 'warm.jsonl'),
            *map(str, sources),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    found = json.loads(done.stdout)
    return float(found['startup']), found['runs']


def number(run: Run, key: str) -> float:
    return float(run[key])  # type: ignore[arg-type]


def numbers(run: Run, key: str) -> list[float]:
    return [float(x) for x in run[key]]  # type: ignore[union-attr]


def growth(runs: list[Run], key: str) -> float:
    """How much the peak after the largest audit exceeds the peak after the smallest (over every process)."""
    peaks = [max([number(r, 'peak_mib')] if key == 'peak_mib' else numbers(r, key)) for r in runs]
    return peaks[-1] / peaks[0] - 1


def test_dask_audit_is_identical_faster_and_memory_bounded(benchmark: BenchmarkFixture, tmp_path: Path):
    pages = load_pages()
    store = tmp_path / 'snapshots.sqlite'
    SnapshotStore(store).put_many(PageSnapshot.from_text(url, html) for url, html, _ in pages)
    rng = random.Random('audit-bench')
    sizes = {'1x': ANSWERS, '2x': 2 * ANSWERS, '4x': 4 * ANSWERS}
    lines = [make_answer(rng, pages).to_json().decode() + '\n' for _ in range(sizes['4x'])]  # all different
    for name, size in sizes.items():
        (tmp_path / f'answers-{name}.jsonl').write_text(''.join(lines[:size]), encoding='utf-8')
    (tmp_path / 'warm.jsonl').write_text(''.join(lines[-200:]), encoding='utf-8')
    del lines
    everything = [tmp_path / f'answers-{name}.jsonl' for name in sizes]

    pairs: list[tuple[Run, Run]] = []
    loops: list[float] = []
    memory: dict[str, list[Run]] = {}
    startups: list[float] = []

    def measure() -> None:
        for n in range(ROUNDS):
            sources = everything if n == 0 else everything[:1]  # the first round also measures memory growth
            loops.append(two_loops())
            if n % 2:
                startup, dask = audit_in('dask', tmp_path, store, sources)
                _, single = audit_in('single', tmp_path, store, sources)
            else:
                _, single = audit_in('single', tmp_path, store, sources)
                startup, dask = audit_in('dask', tmp_path, store, sources)
            startups.append(startup)
            if n == 0:
                memory.update(single=single, dask=dask)
                assert filecmp.cmp(tmp_path / 'single-answers-4x.jsonl', tmp_path / 'dask-answers-4x.jsonl', False)
                assert [r['summary'] for r in single] == [r['summary'] for r in dask]
            assert filecmp.cmp(tmp_path / 'single-answers-1x.jsonl', tmp_path / 'dask-answers-1x.jsonl', False)
            pairs.append((single[0], dask[0]))

    benchmark.pedantic(measure, rounds=1, iterations=1)

    ratios = [number(s, 'seconds') / number(d, 'seconds') for s, d in pairs]
    quiet = [
        r for (s, d), r in zip(pairs, ratios, strict=True) if max(number(s, 'others'), number(d, 'others')) < QUIET
    ]
    speedup = statistics.median(quiet or ratios)
    grew = {
        'single': growth(memory['single'], 'peak_mib'),
        'dask driver': growth(memory['dask'], 'peak_mib'),
        'dask workers': growth(memory['dask'], 'worker_peak_mib'),
    }
    checks = memory['single'][0]['summary']['checks']  # type: ignore[index]
    print(f'\naudit: {ANSWERS} answers, {checks} citation checks, {WORKERS} Dask workers on {os.cpu_count()} cores')
    for n, ((single, dask), ratio) in enumerate(zip(pairs, ratios, strict=True), 1):
        s, d = number(single, 'seconds'), number(dask, 'seconds')
        workers_cpu = numbers(dask, 'workers_cpu')
        driver_cpu = number(dask, 'cpu')
        projected = number(single, 'cpu') / max(max(workers_cpu), (sum(workers_cpu) + driver_cpu) / 2)
        print(
            f'  pair {n} ({"single" if n % 2 else "Dask"} first): single {s:.2f} s ({ANSWERS / s:.0f} answers/s, load {number(single, "load"):.1f}, '
            f'others {number(single, "others"):.2f} cores), Dask {d:.2f} s ({ANSWERS / d:.0f} answers/s, '
            f'load {number(dask, "load"):.1f}, others {number(dask, "others"):.2f} cores): {ratio:.2f}x; '
            f'CPU single {number(single, "cpu"):.2f} s, Dask workers '
            + ' + '.join(f'{c:.2f}' for c in workers_cpu)
            + f' s, driver {driver_cpu:.2f} s: {projected:.2f}x on idle cores; two plain loops at once before it: '
            f'{loops[n - 1]:.2f}x one'
        )
    print(
        f'speed-up: median {speedup:.2f}x over the {len(quiet)} quiet pair(s) (others < {QUIET} cores)'
        if quiet
        else f'speed-up: median {speedup:.2f}x over all pairs (none was quiet)',
        f'(all pairs {min(ratios):.2f}-{max(ratios):.2f}x); outputs identical; '
        f'cluster start-up {statistics.median(startups):.1f} s (not counted)',
    )
    for name, runs in (('single', memory['single']), ('dask', memory['dask'])):
        print(
            f'peak RSS after each audit ({", ".join(f"{n} answers" for n in sizes.values())}): {name} '
            + ', '.join(f'{number(r, "peak_mib"):.0f}' for r in runs)
            + ' MiB'
            + (
                '; workers ' + ', '.join('/'.join(f'{m:.0f}' for m in numbers(r, 'worker_peak_mib')) for r in runs)
                if name == 'dask'
                else ''
            )
        )
    print('growth from 1x to 4x: ' + ', '.join(f'{k} {v:+.1%}' for k, v in grew.items()))
    benchmark.extra_info.update(
        {
            'answers': ANSWERS,
            'speedup_median': round(speedup, 2),
            'speedups': [round(r, 2) for r in ratios],
            'single_seconds': [round(number(s, 'seconds'), 2) for s, _ in pairs],
            'dask_seconds': [round(number(d, 'seconds'), 2) for _, d in pairs],
            'load_average': [(number(s, 'load'), number(d, 'load')) for s, d in pairs],
            'other_cores': [(round(number(s, 'others'), 2), round(number(d, 'others'), 2)) for s, d in pairs],
            'quiet_pairs': len(quiet),
            'two_loops': [round(x, 2) for x in loops],
            'memory_growth': {k: round(v, 3) for k, v in grew.items()},
        }
    )
    for name, value in grew.items():
        assert value <= MEMORY_SLACK, f'peak memory of the {name} grew {value:.1%} from 1x to 4x the answers'
    if not quiet:
        pytest.skip(f'other processes used the cores during every pair: speed-up {speedup:.2f}x not judged')
    assert speedup >= TARGET_SPEEDUP, f'Dask on {WORKERS} workers is only {speedup:.2f}x the single process (median)'

"""The store's SQL, shared by the SQLite and PostgreSQL backends: one home for the schema, migrations and queries.

Statements are written once with `?` placeholders, `{blob}` / `{real}` column types and `{bytewise}` for text
compared byte by byte; `Dialect.sql` turns them into a backend's text (`BLOB` / `BYTEA`, `REAL` / `DOUBLE PRECISION`,
SQLite's default collation / `COLLATE "C"`, `?` / `%s`). Both engines understand the rest as written (`ON CONFLICT`,
`WITH RECURSIVE`, `CAST`, partial indexes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ('POSTGRES', 'SCHEMA', 'SQLITE', 'Dialect', 'pg_unnest')


@dataclass(frozen=True)
class Dialect:
    """How one backend spells the shared statements."""

    blob: str
    real: str
    bytewise: str
    """What follows `TEXT` for a column whose ranges must be byte-ordered (an index range on `host_key`)."""
    placeholder: str

    def sql(self, statement: str) -> str:
        """`statement` in this dialect."""
        text = statement.replace('{blob}', self.blob).replace('{real}', self.real).replace('{bytewise}', self.bytewise)
        if self.placeholder == '%s':
            text = text.replace('%', '%%').replace('?', '%s')
        return text


SQLITE = Dialect('BLOB', 'REAL', '', '?')  # (SQLite's default collation, BINARY, compares bytes)
POSTGRES = Dialect('BYTEA', 'DOUBLE PRECISION', ' COLLATE "C"', '%s')


_VALUES = re.compile(r'^(INSERT INTO \w+ \([^)]*\)) VALUES \((\?(?:, \?)*)\)')


def pg_unnest(statement: str, types: tuple[str, ...]) -> str | None:
    """PostgreSQL only: `INSERT ... VALUES (?, ...)` as one statement for many rows, or `None` for another statement.

    The rows go as one array per column (`types` are their PostgreSQL types) and `unnest` turns them back into rows,
    in order: one statement and one parameter set instead of one per row (the server's and the driver's work per row
    is what a save spends most of its time on otherwise). The result is PostgreSQL's text already, every parameter
    sent in binary (`%b`: no quoting of each element).
    """
    found = _VALUES.match(statement)
    if found is None or found[2].count('?') != len(types) or '?' in statement[found.end() :]:
        return None
    columns = ', '.join(f'CAST(? AS {t}[])' for t in types)
    return POSTGRES.sql(f'{found[1]} SELECT * FROM unnest({columns}){statement[found.end() :]}').replace('%s', '%b')


SCHEMA: tuple[tuple[str, ...], ...] = (
    (
        'CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL, package TEXT)',
        'CREATE TABLE conversations (conversation_id TEXT PRIMARY KEY, scope TEXT, revision TEXT NOT NULL, '
        'updated_at {real} NOT NULL, record {blob} NOT NULL)',
        'CREATE INDEX conversations_scope ON conversations (scope, updated_at)',
        'CREATE INDEX conversations_updated ON conversations (updated_at)',
        'CREATE TABLE entries (id TEXT PRIMARY KEY, parent_id TEXT, kind TEXT NOT NULL, message {blob} NOT NULL)',
        # The head and the branch tips of each conversation: where the entries still in use are reached from (v8:
        # the branch tips alone, the head is `conversations.head_id`).
        'CREATE TABLE tips (conversation_id TEXT NOT NULL, entry_id TEXT NOT NULL)',
        'CREATE INDEX tips_conversation ON tips (conversation_id)',
    ),
    (
        'CREATE TABLE answers (entry_id TEXT PRIMARY KEY, conversation_id TEXT NOT NULL, answer {blob} NOT NULL, '
        'raw {blob} NOT NULL, package_version TEXT NOT NULL, pydantic_ai_version TEXT NOT NULL, provider_name TEXT, '
        'model_name TEXT, response_time TEXT, stored_at TEXT NOT NULL)',
        'CREATE TABLE answer_sources (entry_id TEXT NOT NULL, url TEXT, domain TEXT, document_id TEXT)',
        'CREATE INDEX answer_sources_entry ON answer_sources (entry_id)',
        'CREATE INDEX answer_sources_url ON answer_sources (url)',
        'CREATE INDEX answer_sources_domain ON answer_sources (domain)',
        'CREATE TABLE answer_problems (entry_id TEXT NOT NULL, code TEXT NOT NULL)',
        'CREATE INDEX answer_problems_entry ON answer_problems (entry_id)',
        'CREATE INDEX answer_problems_code ON answer_problems (code)',
    ),
    # v3: no new tables; `answer_sources` gained a row per domain a source is under (and per page domain a Google
    # grounding redirect's title names). Superseded by v4, which rebuilds the table: its data step is gone.
    (),
    # v4: one index for URLs and domains. A URL's row keys it by its host's labels reversed (`_urls.host_key`) and
    # the URL, so a URL is one indexed equality and a domain with every host under it one indexed range, without a
    # row per parent domain; a Google grounding redirect's page domain is a row with that key and an empty URL, and a
    # document id a row with neither (not in that index). Fewer rows and indexes to write per answer.
    (
        'DROP TABLE answer_sources',
        'CREATE TABLE answer_sources (entry_id TEXT NOT NULL, host_key TEXT{bytewise}, url TEXT{bytewise}, '
        'document_id TEXT)',
        'CREATE INDEX answer_sources_entry ON answer_sources (entry_id)',
        'CREATE INDEX answer_sources_host ON answer_sources (host_key, url) WHERE host_key IS NOT NULL',
    ),
    # v5: histories read a run at a time, and no scope index row for a conversation without a scope. An entry's
    # `run_start` is the first entry of its run: the entries one write stored each the parent of the next, their ids
    # rising (`NULL`: a run of its own, as every entry stored before). A run is then one range of the primary key
    # (`CHAIN_RUNS`) instead of one lookup per entry. `WHERE scope = ?` still finds the scope index: it implies
    # `scope IS NOT NULL`.
    (
        'ALTER TABLE entries ADD COLUMN run_start TEXT',
        'DROP INDEX conversations_scope',
        'CREATE INDEX conversations_scope ON conversations (scope, updated_at) WHERE scope IS NOT NULL',
    ),
    # v6: no new tables; internationalised hosts keyed in one spelling (IDNA 2008 A-labels), and the sources cited
    # on text an answer does not show indexed again where v4's rebuild (from the answers alone) left them out.
    (),
    # v7: where each Google grounding redirect led (`index_snapshots`), kept by redirect: an answer stored later that
    # cites one (a history Pydantic AI's `save` rewrote, an edit) is indexed by its page's domain too.
    (
        'CREATE TABLE resolved_redirects (url TEXT{bytewise} NOT NULL, host_key TEXT{bytewise} NOT NULL, '
        'PRIMARY KEY (url, host_key))',
    ),
    # v8: a conversation's head in its own row (`conversations.head_id`), `tips` its branches alone: a save that
    # leaves no branch writes no row of `tips` (two pages of the WAL less per save). Backfilled from the records.
    ('ALTER TABLE conversations ADD COLUMN head_id TEXT',),
)
"""`SCHEMA[n]`: the DDL that upgrades schema version `n` to `n + 1` (data backfills: `BACKFILLS`)."""

LOG_MIGRATION = 'INSERT INTO schema_migrations (version, applied_at, package) VALUES (?, ?, ?)'

# --- data backfills: a setup, then batches read by key (`? ` = the last key of the previous batch, and the batch
# size), then a teardown; each batch is bounded, and every statement is linear in the rows it reads ---

OWNERS_CREATE = 'CREATE TEMP TABLE migrate_owners (id TEXT PRIMARY KEY, conversation_id TEXT NOT NULL)'
OWNERS_FILL = (
    # Each entry's owner: a conversation whose head or branch reaches it (the least id, to be deterministic).
    # `UNION` (not `UNION ALL`) visits each (entry, conversation) once, so a damaged `parent_id` loop ends too.
    'INSERT INTO migrate_owners (id, conversation_id) '
    'WITH RECURSIVE reach(id, conversation_id) AS (SELECT entry_id, conversation_id FROM tips UNION '
    'SELECT e.parent_id, r.conversation_id FROM entries e JOIN reach r ON e.id = r.id WHERE e.parent_id IS NOT NULL) '
    'SELECT id, min(conversation_id) FROM reach GROUP BY id'
)
OWNERS_ANALYZE = 'ANALYZE migrate_owners'
"""Statistics for the planner (PostgreSQL has none for a new temporary table): each batch's join stays indexed."""
OWNERS_DROP = 'DROP TABLE migrate_owners'
ENTRIES_BATCH = (
    'SELECT e.id, e.message, o.conversation_id FROM entries e LEFT JOIN migrate_owners o ON o.id = e.id '
    'WHERE e.id > ? ORDER BY e.id LIMIT ?'
)
ANSWERS_BATCH = (
    # Each answer with its response's message (the citations on text the answer does not show are indexed too).
    'SELECT a.entry_id, a.answer, e.message FROM answers a LEFT JOIN entries e ON e.id = a.entry_id '
    'WHERE a.entry_id > ? ORDER BY a.entry_id LIMIT ?'
)
HOST_KEYS_BATCH = 'SELECT DISTINCT host_key FROM answer_sources WHERE host_key > ? ORDER BY host_key LIMIT ?'
REKEY_HOST = 'UPDATE answer_sources SET host_key = ? WHERE host_key = ?'
INSERT_SOURCE_IF_MISSING = (
    # (entry, host key, URL, host key, URL, entry): a URL or domain row, unless the answer has it already.
    'INSERT INTO answer_sources (entry_id, host_key, url) SELECT CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT) '
    'WHERE NOT EXISTS (SELECT 1 FROM answer_sources WHERE host_key = ? AND url = ? AND entry_id = ?)'
)
INSERT_DOCUMENT_IF_MISSING = (
    # (entry, document, entry, document): a document row, unless the answer has it already.
    'INSERT INTO answer_sources (entry_id, document_id) SELECT CAST(? AS TEXT), CAST(? AS TEXT) '
    'WHERE NOT EXISTS (SELECT 1 FROM answer_sources WHERE entry_id = ? AND document_id = ?)'
)

INSERT_ANSWER = (
    'INSERT INTO answers (entry_id, conversation_id, answer, raw, package_version, pydantic_ai_version, '
    'provider_name, model_name, response_time, stored_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)'
)
UPSERT_ANSWER = INSERT_ANSWER + (
    ' ON CONFLICT (entry_id) DO UPDATE SET conversation_id = excluded.conversation_id, answer = excluded.answer, '
    'raw = excluded.raw, package_version = excluded.package_version, '
    'pydantic_ai_version = excluded.pydantic_ai_version, provider_name = excluded.provider_name, '
    'model_name = excluded.model_name, response_time = excluded.response_time, stored_at = excluded.stored_at'
)
DELETE_SOURCES = 'DELETE FROM answer_sources WHERE entry_id = ?'
DELETE_PROBLEMS = 'DELETE FROM answer_problems WHERE entry_id = ?'
INSERT_SOURCE = 'INSERT INTO answer_sources (entry_id, host_key, url, document_id) VALUES (?, ?, ?, ?)'
"""One index row: a URL with its `host_key` (`''` for a URL without a host), another domain's `host_key` with the URL
`''`, or a document id (the rest `NULL`)."""
INDEX_RESOLVED = (
    # (domain key, redirect's host key, redirect URL, domain key): the domain for every answer citing the URL that is
    # not indexed under it yet.
    "INSERT INTO answer_sources (entry_id, host_key, url) SELECT DISTINCT s.entry_id, CAST(? AS TEXT), '' "
    'FROM answer_sources s WHERE s.host_key = ? AND s.url = ? AND NOT EXISTS (SELECT 1 FROM answer_sources d '
    "WHERE d.entry_id = s.entry_id AND d.host_key = ? AND d.url = '')"
)
REMEMBER_RESOLVED = 'INSERT INTO resolved_redirects (url, host_key) VALUES (?, ?) ON CONFLICT DO NOTHING'
"""(redirect URL key, page's host key): where a grounding redirect led."""
FORGET_RESOLVED = (
    # (the grounding host's key): after a delete, where a redirect no stored answer cites any more led. (A redirect is
    # opaque and made per response: only the answers citing it would ever be indexed by it.)
    'DELETE FROM resolved_redirects WHERE NOT EXISTS (SELECT 1 FROM answer_sources s '
    'WHERE s.host_key = ? AND s.url = resolved_redirects.url)'
)
APPLY_RESOLVED = (
    # (entry, redirect URL key, entry): the domains the redirect an answer cites led to, unless it has them already.
    "INSERT INTO answer_sources (entry_id, host_key, url) SELECT DISTINCT CAST(? AS TEXT), r.host_key, '' "
    'FROM resolved_redirects r WHERE r.url = ? AND NOT EXISTS (SELECT 1 FROM answer_sources d '
    "WHERE d.entry_id = ? AND d.host_key = r.host_key AND d.url = '')"
)
INSERT_PROBLEM = 'INSERT INTO answer_problems (entry_id, code) VALUES (?, ?)'
COPY_RESOLVED = (
    # (new entry, old entry, new entry): the domains `index_snapshots` gave the old entry's answer, for its copy (an
    # edit stores the messages after the edited one again), unless the copy is indexed under one already.
    "INSERT INTO answer_sources (entry_id, host_key, url) SELECT DISTINCT CAST(? AS TEXT), s.host_key, '' "
    "FROM answer_sources s WHERE s.entry_id = ? AND s.url = '' AND s.host_key IS NOT NULL AND NOT EXISTS "
    "(SELECT 1 FROM answer_sources d WHERE d.entry_id = ? AND d.host_key = s.host_key AND d.url = '')"
)

RECORD = 'SELECT record FROM conversations WHERE conversation_id = ?'
RECORD_AND_SCOPE = 'SELECT record, scope FROM conversations WHERE conversation_id = ?'
REVISION = 'SELECT revision FROM conversations WHERE conversation_id = ?'
RECORDS = 'SELECT conversation_id, record FROM conversations'
RECORDS_IN_SCOPE = ' WHERE scope = ?'
RECORDS_ORDER = ' ORDER BY updated_at DESC'
LIMIT = ' LIMIT ?'
HAS_ENTRY = 'SELECT 1 FROM entries WHERE id = ?'
INSERT_ENTRY = 'INSERT INTO entries (id, parent_id, kind, message, run_start) VALUES (?, ?, ?, ?, ?)'
INSERT_ENTRY_IF_NEW = INSERT_ENTRY + ' ON CONFLICT (id) DO NOTHING'
PG_SAVE_CHECKS = (
    'SELECT (SELECT revision FROM conversations WHERE conversation_id = ?), EXISTS (SELECT 1 FROM entries WHERE id = ?)'
)
"""PostgreSQL only, what a save checks: the conversation's revision, and whether its head is stored."""
ENTRY = 'SELECT id, parent_id, kind, message FROM entries WHERE id = ?'
UPSERT_RECORD = (
    'INSERT INTO conversations (conversation_id, scope, revision, updated_at, record, head_id) '
    'VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (conversation_id) DO UPDATE SET scope = excluded.scope, '
    'revision = excluded.revision, updated_at = excluded.updated_at, record = excluded.record, '
    'head_id = excluded.head_id'
)
RECORDS_BATCH = (
    'SELECT conversation_id, record FROM conversations WHERE conversation_id > ? ORDER BY conversation_id LIMIT ?'
)
SET_HEAD = 'UPDATE conversations SET head_id = ? WHERE conversation_id = ?'
DELETE_TIPS = 'DELETE FROM tips WHERE conversation_id = ?'
INSERT_TIP = 'INSERT INTO tips (conversation_id, entry_id) VALUES (?, ?)'
DELETE_RECORD = 'DELETE FROM conversations WHERE conversation_id = ?'
_REACHABLE = (
    # From each conversation's head (v8) and branch tips.
    'WITH RECURSIVE reach(id) AS (SELECT t.id FROM (SELECT entry_id AS id FROM tips UNION ALL '
    'SELECT head_id FROM conversations WHERE head_id IS NOT NULL) t UNION '
    'SELECT e.parent_id FROM entries e JOIN reach r ON e.id = r.id WHERE e.parent_id IS NOT NULL) '
)
COLLECT_GARBAGE = (
    _REACHABLE + 'DELETE FROM answer_sources WHERE entry_id NOT IN (SELECT id FROM reach)',
    _REACHABLE + 'DELETE FROM answer_problems WHERE entry_id NOT IN (SELECT id FROM reach)',
    _REACHABLE + 'DELETE FROM answers WHERE entry_id NOT IN (SELECT id FROM reach)',
    _REACHABLE + 'DELETE FROM entries WHERE id NOT IN (SELECT id FROM reach)',
)
"""After a conversation's record and tips are gone: drop what no remaining head or branch reaches."""
PG_COLLECT_GARBAGE = (
    # The walk from every tip goes one entry a step, by the primary key: the planner, guessing badly for a table
    # without statistics (new, or changed since autovacuum last ran), joined each step with a hash of the whole table,
    # built again every step (20,000 messages: 105 s, the write lock held). So the walk runs with hash and merge joins
    # off, into a table of its own; the deletes, anti-joins against it, run with them on again.
    'SET LOCAL enable_hashjoin = off',
    'SET LOCAL enable_mergejoin = off',
    'CREATE TEMP TABLE gc_reach ON COMMIT DROP AS ' + _REACHABLE + 'SELECT DISTINCT id FROM reach',
    'RESET enable_hashjoin',
    'RESET enable_mergejoin',
    'ANALYZE gc_reach',
    'DELETE FROM answer_sources x WHERE NOT EXISTS (SELECT 1 FROM gc_reach r WHERE r.id = x.entry_id)',
    'DELETE FROM answer_problems x WHERE NOT EXISTS (SELECT 1 FROM gc_reach r WHERE r.id = x.entry_id)',
    'DELETE FROM answers x WHERE NOT EXISTS (SELECT 1 FROM gc_reach r WHERE r.id = x.entry_id)',
    'DELETE FROM entries x WHERE NOT EXISTS (SELECT 1 FROM gc_reach r WHERE r.id = x.id)',
)
"""PostgreSQL's `COLLECT_GARBAGE`: the same rows deleted, in linear time whatever the table statistics say."""
CHAIN = (
    # One page of a history, from `?` (the head) towards the root, at most `?` entries (`CHAIN_PAGE`: a damaged
    # `parent_id` loop costs one page before the reader sees it repeat). The walk carries each entry's columns, so no
    # entry is looked up twice.
    'WITH RECURSIVE chain(id, parent_id, kind, message, depth) AS (SELECT id, parent_id, kind, message, 1 FROM entries '
    'WHERE id = ? UNION ALL SELECT e.id, e.parent_id, e.kind, e.message, c.depth + 1 FROM entries e '
    'JOIN chain c ON e.id = c.parent_id WHERE c.depth < CAST(? AS INTEGER)) '
    'SELECT id, parent_id, kind, message FROM chain ORDER BY depth'
)
_RUN_START = 'CASE WHEN {e}.run_start < {e}.id THEN {e}.run_start ELSE {e}.id END'
_RUNS = (
    # The runs of a history, from the one ending at the head: each run's last and first entry, the next run ending at
    # the parent of this one's first. `UNION` adds each run once: a damaged `parent_id` loop ends after one turn.
    'runs(head_id, start_id) AS (SELECT e.id, ' + _RUN_START.format(e='e') + ' FROM entries e {head} '
    'UNION SELECT e.id, ' + _RUN_START.format(e='e') + ' FROM runs u '
    'JOIN entries f ON f.id = u.start_id JOIN entries e ON e.id = f.parent_id) '
)
_IN_RUNS = 'FROM runs u JOIN entries e ON e.id >= u.start_id AND e.id <= u.head_id'
CHAIN_RUNS = (
    # A history from `?` (the head), run by run (`runs`): each run one range of ids. The range holds the run's
    # entries, and any other entry whose id falls between (another writer's, at the same time): the reader follows
    # `parent_id`s from the head through what it got, then reads on entry by entry (`CHAIN`) where that ends.
    'WITH RECURSIVE ' + _RUNS.format(head='WHERE e.id = ?') + 'SELECT e.id, e.parent_id, e.kind, e.message ' + _IN_RUNS
)
_PG_HEAD = 'e.id = (SELECT head_id FROM conversations WHERE conversation_id = ?)'
_PG_RECORD_ROW = 'SELECT head_id, scope, NULL, record, 0 FROM conversations WHERE conversation_id = ? UNION ALL '
"""The record's row of `PG_LOAD` / `PG_LOAD_RUNS`: (head, scope, -, record, depth 0), in the history's columns."""
PG_LOAD = (
    # PostgreSQL only: `load(limit=...)` in one round trip: the record's row (`_PG_RECORD_ROW`, depth 0), then the
    # history's `(id, parent_id, kind, message, depth)` rows (depth 1 on) from the head the row holds (v8's column: the
    # caller checks it against the record). One statement, so one snapshot. The walk carries each entry's columns, so
    # no entry is looked up twice. The rows are appended, not joined or sorted (which copied every message twice
    # more): the caller puts them in depth order. Parameters: (conversation, page size, conversation).
    'WITH RECURSIVE chain(id, parent_id, kind, message, depth) AS (SELECT e.id, e.parent_id, e.kind, e.message, 1 '
    'FROM entries e WHERE ' + _PG_HEAD + ' UNION ALL SELECT e.id, e.parent_id, e.kind, e.message, c.depth + 1 '
    'FROM entries e JOIN chain c ON e.id = c.parent_id WHERE c.depth < CAST(? AS INTEGER)) '
    + _PG_RECORD_ROW
    + 'SELECT id, parent_id, kind, message, depth FROM chain'
)
PG_LOAD_RUNS = (
    # PostgreSQL only: `load()` (the whole history) in one round trip, as `PG_LOAD` but run by run (`CHAIN_RUNS`):
    # the history's rows come in no particular order (depth 1), the reader follows their `parent_id`s. Parameters:
    # (conversation, conversation). (The head was read from the record's JSON bytes before v8 gave it a column; the
    # row read straight from the table, not through a CTE of the record, spares the server a materialised CTE.)
    'WITH RECURSIVE '
    + _RUNS.format(head='WHERE ' + _PG_HEAD)
    + _PG_RECORD_ROW
    + 'SELECT e.id, e.parent_id, e.kind, e.message, 1 '
    + _IN_RUNS
)
ANSWERS = (
    'SELECT a.entry_id, a.conversation_id, a.answer, a.raw, a.package_version, a.pydantic_ai_version, '
    'a.provider_name, a.model_name, a.response_time, a.stored_at FROM answers a '
)
BY_ENTRY = 'WHERE a.entry_id = ?'
CITING_URL = 'WHERE a.entry_id IN (SELECT entry_id FROM answer_sources WHERE host_key = ? AND url = ?)'
CITING_DOMAIN = 'WHERE a.entry_id IN (SELECT entry_id FROM answer_sources WHERE host_key >= ? AND host_key < ?)'
"""A domain and every host under it: the range of their `host_key`s (`_urls.domain_range`)."""
CITING_HOST = 'WHERE a.entry_id IN (SELECT entry_id FROM answer_sources WHERE host_key = ?)'
"""A host nothing is under (an IP address, a one-label host): its `host_key` alone."""
WITH_PROBLEM = 'WHERE a.entry_id IN (SELECT entry_id FROM answer_problems WHERE code = ?)'
AFTER_ENTRY = 'WHERE a.entry_id > ?'
BY_STORED = ' ORDER BY a.stored_at, a.entry_id'
BY_ENTRY_ID = ' ORDER BY a.entry_id'

"""The store's SQL, shared by the SQLite and PostgreSQL backends: one home for the schema, migrations and queries.

Statements are written once with `?` placeholders and `{blob}` / `{real}` column types; `Dialect.sql` turns them into
a backend's text (`BLOB` / `BYTEA`, `REAL` / `DOUBLE PRECISION`, `?` / `%s`). Both engines understand the rest as
written (`ON CONFLICT`, `WITH RECURSIVE`, `CAST`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ('POSTGRES', 'SCHEMA', 'SQLITE', 'Dialect')


@dataclass(frozen=True)
class Dialect:
    """How one backend spells the shared statements."""

    blob: str
    real: str
    placeholder: str

    def sql(self, statement: str) -> str:
        """`statement` in this dialect."""
        text = statement.replace('{blob}', self.blob).replace('{real}', self.real)
        if self.placeholder == '%s':
            text = text.replace('%', '%%').replace('?', '%s')
        return text


SQLITE = Dialect('BLOB', 'REAL', '?')
POSTGRES = Dialect('BYTEA', 'DOUBLE PRECISION', '%s')

SCHEMA: tuple[tuple[str, ...], ...] = (
    (
        'CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL, package TEXT)',
        'CREATE TABLE conversations (conversation_id TEXT PRIMARY KEY, scope TEXT, revision TEXT NOT NULL, '
        'updated_at {real} NOT NULL, record {blob} NOT NULL)',
        'CREATE INDEX conversations_scope ON conversations (scope, updated_at)',
        'CREATE INDEX conversations_updated ON conversations (updated_at)',
        'CREATE TABLE entries (id TEXT PRIMARY KEY, parent_id TEXT, kind TEXT NOT NULL, message {blob} NOT NULL)',
        # The head and the branch tips of each conversation: where the entries still in use are reached from.
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
)
"""`SCHEMA[n]`: the DDL that upgrades schema version `n` to `n + 1` (data backfills are the backends' own)."""

LOG_MIGRATION = 'INSERT INTO schema_migrations (version, applied_at, package) VALUES (?, ?, ?)'
ENTRIES_ALL = 'SELECT id, message FROM entries'
TIPS_ALL = 'SELECT entry_id, conversation_id FROM tips'
REACHES = (
    'WITH RECURSIVE chain(id, parent_id) AS (SELECT id, parent_id FROM entries WHERE id = ? '
    'UNION ALL SELECT e.id, e.parent_id FROM entries e JOIN chain c ON e.id = c.parent_id) '
    'SELECT 1 FROM chain WHERE id = ? LIMIT 1'
)

UPSERT_ANSWER = (
    'INSERT INTO answers (entry_id, conversation_id, answer, raw, package_version, pydantic_ai_version, '
    'provider_name, model_name, response_time, stored_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) '
    'ON CONFLICT (entry_id) DO UPDATE SET conversation_id = excluded.conversation_id, answer = excluded.answer, '
    'raw = excluded.raw, package_version = excluded.package_version, '
    'pydantic_ai_version = excluded.pydantic_ai_version, provider_name = excluded.provider_name, '
    'model_name = excluded.model_name, response_time = excluded.response_time, stored_at = excluded.stored_at'
)
DELETE_SOURCES = 'DELETE FROM answer_sources WHERE entry_id = ?'
DELETE_PROBLEMS = 'DELETE FROM answer_problems WHERE entry_id = ?'
INSERT_URL_SOURCE = 'INSERT INTO answer_sources (entry_id, url, domain) VALUES (?, ?, ?)'
INSERT_DOCUMENT_SOURCE = 'INSERT INTO answer_sources (entry_id, document_id) VALUES (?, ?)'
INSERT_PROBLEM = 'INSERT INTO answer_problems (entry_id, code) VALUES (?, ?)'

RECORD = 'SELECT record FROM conversations WHERE conversation_id = ?'
RECORD_AND_SCOPE = 'SELECT record, scope FROM conversations WHERE conversation_id = ?'
REVISION = 'SELECT revision FROM conversations WHERE conversation_id = ?'
RECORDS = 'SELECT conversation_id, record FROM conversations'
RECORDS_IN_SCOPE = ' WHERE scope = ?'
RECORDS_ORDER = ' ORDER BY updated_at DESC'
LIMIT = ' LIMIT ?'
HAS_ENTRY = 'SELECT 1 FROM entries WHERE id = ?'
INSERT_ENTRY = 'INSERT INTO entries (id, parent_id, kind, message) VALUES (?, ?, ?, ?)'
INSERT_ENTRY_IF_NEW = INSERT_ENTRY + ' ON CONFLICT (id) DO NOTHING'
ENTRY = 'SELECT id, parent_id, kind, message FROM entries WHERE id = ?'
UPSERT_RECORD = (
    'INSERT INTO conversations (conversation_id, scope, revision, updated_at, record) VALUES (?, ?, ?, ?, ?) '
    'ON CONFLICT (conversation_id) DO UPDATE SET scope = excluded.scope, revision = excluded.revision, '
    'updated_at = excluded.updated_at, record = excluded.record'
)
DELETE_TIPS = 'DELETE FROM tips WHERE conversation_id = ?'
INSERT_TIP = 'INSERT INTO tips (conversation_id, entry_id) VALUES (?, ?)'
DELETE_RECORD = 'DELETE FROM conversations WHERE conversation_id = ?'
_REACHABLE = (
    'WITH RECURSIVE reach(id) AS (SELECT entry_id FROM tips UNION '
    'SELECT e.parent_id FROM entries e JOIN reach r ON e.id = r.id WHERE e.parent_id IS NOT NULL) '
)
COLLECT_GARBAGE = (
    _REACHABLE + 'DELETE FROM answer_sources WHERE entry_id NOT IN (SELECT id FROM reach)',
    _REACHABLE + 'DELETE FROM answer_problems WHERE entry_id NOT IN (SELECT id FROM reach)',
    _REACHABLE + 'DELETE FROM answers WHERE entry_id NOT IN (SELECT id FROM reach)',
    _REACHABLE + 'DELETE FROM entries WHERE id NOT IN (SELECT id FROM reach)',
)
"""After a conversation's record and tips are gone: drop what no remaining head or branch reaches."""
CHAIN = (
    'WITH RECURSIVE chain(id, parent_id, kind, message, depth) AS ('
    'SELECT id, parent_id, kind, message, 1 FROM entries WHERE id = ? '
    'UNION ALL SELECT e.id, e.parent_id, e.kind, e.message, c.depth + 1 FROM entries e '
    'JOIN chain c ON e.id = c.parent_id WHERE CAST(? AS INTEGER) IS NULL OR c.depth < CAST(? AS INTEGER)) '
    'SELECT id, parent_id, kind, message FROM chain ORDER BY depth DESC'
)
ANSWERS = (
    'SELECT a.entry_id, a.conversation_id, a.answer, a.raw, a.package_version, a.pydantic_ai_version, '
    'a.provider_name, a.model_name, a.response_time, a.stored_at FROM answers a '
)
BY_ENTRY = 'WHERE a.entry_id = ?'
CITING_URL = 'WHERE a.entry_id IN (SELECT entry_id FROM answer_sources WHERE url = ?)'
CITING_DOMAIN = (
    "WHERE a.entry_id IN (SELECT entry_id FROM answer_sources WHERE domain = ? OR domain LIKE '%.' || CAST(? AS TEXT))"
)
WITH_PROBLEM = 'WHERE a.entry_id IN (SELECT entry_id FROM answer_problems WHERE code = ?)'
AFTER_ENTRY = 'WHERE a.entry_id > ?'
BY_STORED = ' ORDER BY a.stored_at, a.entry_id'
BY_ENTRY_ID = ' ORDER BY a.entry_id'

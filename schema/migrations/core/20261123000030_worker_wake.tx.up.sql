-- How each worker learns of new work: 'listen' (LISTEN/NOTIFY on a session
-- connection, with polling as the fallback) or 'poll' (no session
-- connection to listen on, e.g. behind a transaction pooler).
ALTER TABLE {{.Schema}}.workers ADD COLUMN wake text NOT NULL DEFAULT 'listen';

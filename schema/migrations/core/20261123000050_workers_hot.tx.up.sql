-- Every worker rewrites its row at every heartbeat. With no index on the
-- columns a heartbeat changes (expires_at was indexed) and room left in
-- each page, those rewrites are heap-only: no index entry per beat, and
-- pages are pruned as they go. The table has one row per worker and is
-- read whole.
DROP INDEX {{.Schema}}.workers_expires_at;
ALTER TABLE {{.Schema}}.workers SET (fillfactor = 50);

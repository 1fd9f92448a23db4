-- Heartbeats and checkpoints rewrite task rows heap-only (HOT).
--
-- An update is heap-only when it changes no column that an index covers,
-- in its key or its predicate, and the new version fits in the row's page.
-- Before, tasks_claimable covered lease_expires_at (renewed by heartbeats)
-- and position (in its predicate, moved by every checkpoint), so every
-- renewal and every checkpoint added an entry to each of the table's
-- indexes. While a long transaction holds a snapshot (a report, say), none
-- of those entries nor the versions they point to can be removed, and the
-- statements that read many task rows walk them all.
--
-- Now no index covers what a heartbeat or a checkpoint changes:
--
--   claimable_at is when an unowned partition with pending work that is
--   not quarantined may be claimed (its lease_expires_at: -infinity, or
--   the end of its back-off), NULL for every other row. It is computed by
--   the server, so every writer keeps it right (producers, the loader,
--   hand-written SQL). A heartbeat or a checkpoint of an owned row leaves
--   it NULL; only changes of ownership, failures, retries and a producer
--   turning a caught-up unowned row pending change it.
--
--   tasks_claimable covers claimable_at alone: the head of a kind's range
--   is the unowned rows to claim, earliest first.
--
--   A partition whose owner stopped heartbeating is found through its
--   owner instead (tasks_owner): the rows of the workers whose
--   registration has expired or who stopped, where each row's own lease
--   has ended. The owner column changes only with ownership.
--
-- Room is left in each page for the new versions of its rows: while old
-- versions cannot be pruned, a page fills with them and the next update
-- of one of its rows moves it to another page (an ordinary update); with
-- fillfactor 30 a row gets about two heap-only updates per move even then,
-- and as many as it needs while old versions are pruned as they go.
ALTER TABLE {{.Schema}}.tasks SET (fillfactor = 30);

-- (Adding a stored generated column rewrites the table, packed at the new
-- fill factor.)
ALTER TABLE {{.Schema}}.tasks ADD COLUMN claimable_at timestamptz
    GENERATED ALWAYS AS (CASE WHEN owner IS NULL AND available > position AND failed_at IS NULL
                              THEN lease_expires_at END) STORED;

DROP INDEX {{.Schema}}.tasks_claimable;
CREATE INDEX tasks_claimable ON {{.Schema}}.tasks (kind, claimable_at) WHERE claimable_at IS NOT NULL;

-- Every owner has a worker row from now on (claims register an owner that
-- never heartbeated, as not live), so that its partitions are found once
-- its registration ends. Owners of existing rows without one (an upgraded
-- database, rows written by hand) get one that is not live: their rows
-- are taken over once their leases end, as before.
INSERT INTO {{.Schema}}.workers (instance_id, name, kind, expires_at)
SELECT DISTINCT ON (owner) owner, split_part(owner, '#', 1), kind, now()
FROM {{.Schema}}.tasks WHERE owner IS NOT NULL
ORDER BY owner, kind
ON CONFLICT (instance_id) DO NOTHING;

ANALYZE {{.Schema}}.tasks;

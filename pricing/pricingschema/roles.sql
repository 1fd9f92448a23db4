-- Least-privilege roles for baton. Run as the database owner after
-- "worker migrate" (which itself needs the owner: it creates tables), with
-- {{.Schema}} replaced by baton's schema (schema.SQL does it; "baton" by default).
-- Set passwords afterwards, e.g. \password baton_worker in psql.
--
-- baton_worker: "worker run" (with its scheduled jobs), "status", "export",
-- "retry", "schedule"; leader election and entity locks.
-- baton_loader: "worker load" (and "seed --load").
-- Both need CONNECT and TEMPORARY on the database, which PUBLIC has by
-- default; if you revoked them, grant them to these roles too.

CREATE ROLE baton_worker LOGIN;
GRANT USAGE ON SCHEMA {{.Schema}} TO baton_worker;
GRANT SELECT ON {{.Schema}}.core_migrations, {{.Schema}}.pricing_migrations TO baton_worker;
GRANT SELECT ON {{.Schema}}.contracts, {{.Schema}}.tiers, {{.Schema}}.records, {{.Schema}}.record_chunks, {{.Schema}}.pruned_totals TO baton_worker;
GRANT SELECT ON {{.Schema}}.pruned_chunks, {{.Schema}}.pruned_records TO baton_worker;
GRANT SELECT ON {{.Schema}}.tasks TO baton_worker;
GRANT UPDATE (version, owner, claimed_at, heartbeat_at, lease_expires_at, position, checkpoint,
              attempts, last_error, failed_at, updated_at, traceparent)
    ON {{.Schema}}.tasks TO baton_worker;                                    -- claim, heartbeat, fence, checkpoint, release
GRANT INSERT, DELETE ON {{.Schema}}.tasks TO baton_worker;                   -- segments split off a contract, and removed once priced
GRANT SELECT ON {{.Schema}}.partition_progress TO baton_worker;               -- a contract's progress with its segments'
GRANT SELECT, INSERT, UPDATE, DELETE ON {{.Schema}}.workers TO baton_worker; -- registration and liveness
GRANT SELECT, INSERT ON {{.Schema}}.priced_rows TO baton_worker;             -- output, every generation's
GRANT SELECT ON {{.Schema}}.priced TO baton_worker;                          -- the current rows (a view of priced_rows)
GRANT SELECT, INSERT, DELETE ON {{.Schema}}.events TO baton_worker;          -- ownership history, pruned by age
GRANT SELECT, INSERT, DELETE ON {{.Schema}}.backlog_samples TO baton_worker; -- backlog signals of workers serving metrics and "signals", pruned by age
GRANT SELECT ON {{.Schema}}.pauses TO baton_worker;                          -- paused partitions and kinds are not claimed
GRANT SELECT, INSERT, UPDATE, DELETE ON {{.Schema}}.jobs TO baton_worker;    -- scheduled jobs: runs and "worker schedule"
GRANT SELECT, INSERT, UPDATE ON {{.Schema}}.leaderships TO baton_worker;     -- leader election
GRANT SELECT, INSERT, DELETE ON {{.Schema}}.entity_locks TO baton_worker;    -- entity locks (row method)
GRANT DELETE ON {{.Schema}}.priced_rows TO baton_worker;                     -- rows of pruned generations and records
GRANT SELECT, UPDATE, DELETE ON {{.Schema}}.generations TO baton_worker;     -- a generation becomes current; pruned
GRANT SELECT ON {{.Schema}}.amendments TO baton_worker;
GRANT UPDATE (current_generation) ON {{.Schema}}.contracts TO baton_worker;

CREATE ROLE baton_loader LOGIN;
GRANT USAGE ON SCHEMA {{.Schema}} TO baton_loader;
GRANT SELECT ON {{.Schema}}.core_migrations, {{.Schema}}.pricing_migrations TO baton_loader;
GRANT SELECT, INSERT ON {{.Schema}}.contracts, {{.Schema}}.record_chunks TO baton_loader;
GRANT SELECT, INSERT ON {{.Schema}}.records TO baton_loader;                  -- a view of record_chunks (inserts become chunks)
GRANT SELECT, INSERT, DELETE ON {{.Schema}}.tiers TO baton_loader;           -- a tiers file replaces a contract's set
GRANT SELECT, INSERT, UPDATE ON {{.Schema}}.loads TO baton_loader;
GRANT SELECT, INSERT ON {{.Schema}}.tasks TO baton_loader;                   -- a task row per new contract
GRANT UPDATE (available, updated_at) ON {{.Schema}}.tasks TO baton_loader;   -- available += n, nothing else
GRANT USAGE ON SEQUENCE {{.Schema}}.loads_load_id_seq TO baton_loader;
-- Re-rating ("worker load --reprice/--amend", "worker reprice"): amounts
-- amended, generations started, task rows rewound.
GRANT UPDATE (amounts) ON {{.Schema}}.record_chunks TO baton_loader;
GRANT SELECT, INSERT ON {{.Schema}}.amendments TO baton_loader;
GRANT USAGE ON SEQUENCE {{.Schema}}.amendments_amendment_id_seq TO baton_loader;
GRANT SELECT, INSERT, UPDATE ON {{.Schema}}.generations TO baton_loader;
GRANT SELECT, DELETE ON {{.Schema}}.priced_rows TO baton_loader;             -- an abandoned generation's rows
GRANT SELECT ON {{.Schema}}.priced, {{.Schema}}.pruned_totals TO baton_loader;
GRANT SELECT ON {{.Schema}}.pruned_chunks, {{.Schema}}.pruned_records TO baton_loader; -- record ids of pruned loads: re-deliveries
GRANT UPDATE (generation, version, owner, lease_expires_at, position, checkpoint, failed_at, attempts, last_error, traceparent, updated_at)
    ON {{.Schema}}.tasks TO baton_loader;                                    -- the rewind of a re-priced contract
GRANT DELETE ON {{.Schema}}.tasks TO baton_loader;                           -- the rewind removes the contract's segments
GRANT SELECT ON {{.Schema}}.partition_progress TO baton_loader;
GRANT INSERT ON {{.Schema}}.events TO baton_loader;                          -- its "rewound" event

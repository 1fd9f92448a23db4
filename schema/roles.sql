-- Least-privilege roles for baton. Run as the database owner after
-- "worker migrate" (which itself needs the owner: it creates tables).
-- Set passwords afterwards, e.g. \password baton_worker in psql.
--
-- baton_worker: "worker run" (with its scheduled jobs), "status", "export",
-- "retry", "schedule"; leader election and entity locks.
-- baton_loader: "worker load" (and "seed --load").
-- Both need CONNECT and TEMPORARY on the database, which PUBLIC has by
-- default; if you revoked them, grant them to these roles too.

CREATE ROLE baton_worker LOGIN;
GRANT USAGE ON SCHEMA public TO baton_worker;
GRANT SELECT ON bun_migrations, contracts, tiers, records TO baton_worker;
GRANT SELECT ON tasks TO baton_worker;
GRANT UPDATE (version, owner, claimed_at, heartbeat_at, lease_expires_at, position, checkpoint,
              attempts, last_error, failed_at, updated_at, traceparent)
    ON tasks TO baton_worker;                                    -- claim, heartbeat, fence, checkpoint, release
GRANT SELECT, INSERT, UPDATE, DELETE ON workers TO baton_worker; -- registration and liveness
GRANT SELECT, INSERT ON priced TO baton_worker;                  -- output
GRANT SELECT, INSERT, DELETE ON events TO baton_worker;          -- ownership history, pruned by age
GRANT SELECT, INSERT, UPDATE, DELETE ON jobs TO baton_worker;    -- scheduled jobs: runs and "worker schedule"
GRANT SELECT, INSERT, UPDATE ON leaderships TO baton_worker;     -- leader election
GRANT SELECT, INSERT, DELETE ON entity_locks TO baton_worker;    -- entity locks (row method)

CREATE ROLE baton_loader LOGIN;
GRANT USAGE ON SCHEMA public TO baton_loader;
GRANT SELECT ON bun_migrations TO baton_loader;
GRANT SELECT, INSERT ON contracts, records TO baton_loader;
GRANT SELECT, INSERT, DELETE ON tiers TO baton_loader;           -- a tiers file replaces a contract's set
GRANT SELECT, INSERT, UPDATE ON loads TO baton_loader;
GRANT SELECT, INSERT ON tasks TO baton_loader;                   -- a task row per new contract
GRANT UPDATE (available, updated_at) ON tasks TO baton_loader;   -- available += n, nothing else
GRANT USAGE ON SEQUENCE loads_load_id_seq TO baton_loader;

-- Kinds: the processor a partition belongs to, as a job's kind names its
-- queue. Several processors may share baton's schema (the pricing workers
-- and a service that embeds the distributor, say), and their partitions
-- may have the same names: each is a task row of its own kind, and every
-- claim, renewal, fence, release, status and producer statement names the
-- kind, so a processor only ever sees, claims and advances its own rows.
-- Before kinds, two processors in one schema shared rows of the same name:
-- one added its items to the other's partitions and moved their
-- checkpoints past work it never did.
ALTER TABLE {{.Schema}}.tasks ADD COLUMN kind text COLLATE "C" NOT NULL DEFAULT 'default';

-- A partition is (kind, partition_key). Statements that lock several task
-- rows lock them in this order; each protocol statement locks rows of its
-- own kind only.
ALTER TABLE {{.Schema}}.tasks DROP CONSTRAINT tasks_pkey;
ALTER TABLE {{.Schema}}.tasks ADD PRIMARY KEY (kind, partition_key);

-- The claimable index leads with the kind: a poll reads the head of its
-- own kind's range only.
DROP INDEX {{.Schema}}.tasks_claimable;
CREATE INDEX tasks_claimable ON {{.Schema}}.tasks (kind, lease_expires_at)
    WHERE available > position AND failed_at IS NULL;

-- Workers count towards the fair share of their own kind only.
-- Heartbeats write it; no index covers it (they stay heap-only updates).
ALTER TABLE {{.Schema}}.workers ADD COLUMN kind text COLLATE "C" NOT NULL DEFAULT 'default';

-- The kind of the partition an event belongs to (events.kind is the
-- event's own: claimed, takeover...).
ALTER TABLE {{.Schema}}.events ADD COLUMN task_kind text COLLATE "C" NOT NULL DEFAULT 'default';

-- Existing rows. In a schema with the pricing set applied, the task rows
-- of contracts are the pricing workers' (kind 'pricing'), so they stay
-- claimable by them, with their history and the workers registered now;
-- any other row keeps 'default', the kind of a store or distributor that
-- names none. (A row that two processors already shared cannot be split:
-- it goes to pricing, and status reports a checkpoint beyond the
-- contract's records.) The pricing set is applied after this one, so on a
-- fresh database there is nothing to update.
DO $$
BEGIN
    IF to_regclass('{{.Schema}}.pricing_migrations') IS NOT NULL AND to_regclass('{{.Schema}}.contracts') IS NOT NULL THEN
        EXECUTE 'UPDATE {{.Schema}}.tasks SET kind = ''pricing''
                  WHERE partition_key IN (SELECT contract_id FROM {{.Schema}}.contracts)';
        EXECUTE 'UPDATE {{.Schema}}.events SET task_kind = ''pricing''
                  WHERE partition_key IN (SELECT contract_id FROM {{.Schema}}.contracts)';
        EXECUTE 'UPDATE {{.Schema}}.workers SET kind = ''pricing''';
    END IF;
END $$;

-- A task row's claimable_at is the time it became claimable, so that the
-- head of tasks_claimable can be read from a floor.
--
-- Every claim takes a row out of tasks_claimable and every release (or
-- producer turning a caught-up row pending) puts it back under a new
-- entry. While a long transaction holds a snapshot (a report, say), the
-- entries of rows claimed since cannot be removed, and until now they all
-- had the same key (-infinity): each read of the index's head walked all
-- of them, a cost growing for as long as the snapshot was held.
--
-- Now a row that becomes claimable (unowned, with pending work, not
-- quarantined, when it was not all three before; or inserted so), or a
-- claimable row whose lease_expires_at is set to a time already past (a
-- back-off ended early by a retry or by hand), gets the time of that write
-- as its lease_expires_at, hence as its claimable_at; a later time (a
-- failure's back-off) is kept. The trigger sets it, so
-- every writer keeps it right: releases, hand-backs, retries, producers,
-- the loader and hand-written SQL. Keys then grow with time, the entries
-- of claimed rows sit below the live ones, and a worker reads the index
-- from a little below the earliest claimable row it last saw (see
-- partition's Candidates) instead of from the start.
--
-- The trigger's condition is evaluated for every updated row but the
-- function runs only when a row becomes claimable: heartbeats and
-- checkpoints of owned rows never call it and stay heap-only updates.
CREATE FUNCTION {{.Schema}}.tasks_claimable_since() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.lease_expires_at := clock_timestamp();
    RETURN NEW;
END
$$;

CREATE TRIGGER tasks_claimable_since_update BEFORE UPDATE ON {{.Schema}}.tasks
FOR EACH ROW
WHEN (NEW.owner IS NULL AND NEW.failed_at IS NULL AND NEW.available > NEW.position
      AND NEW.lease_expires_at < now()
      AND (NEW.lease_expires_at IS DISTINCT FROM OLD.lease_expires_at
           OR NOT (OLD.owner IS NULL AND OLD.failed_at IS NULL AND OLD.available > OLD.position)))
EXECUTE FUNCTION {{.Schema}}.tasks_claimable_since();

CREATE TRIGGER tasks_claimable_since_insert BEFORE INSERT ON {{.Schema}}.tasks
FOR EACH ROW
WHEN (NEW.owner IS NULL AND NEW.failed_at IS NULL AND NEW.available > NEW.position
      AND NEW.lease_expires_at < now())
EXECUTE FUNCTION {{.Schema}}.tasks_claimable_since();

-- Rows claimable now keep their place in line, earliest first, with
-- times instead of -infinity.
UPDATE {{.Schema}}.tasks SET lease_expires_at = now()
WHERE claimable_at = '-infinity';

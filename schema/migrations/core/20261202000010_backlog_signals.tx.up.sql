-- Backlog signals: what the lag, rate and drain figures are computed from
-- (package backlog). Nothing here is indexed and the triggers' functions
-- run only on the writes they describe, so heartbeats and checkpoints stay
-- heap-only updates and call no function.
--
-- pending_since is the time (clock_timestamp() of the write) the row last
-- went from having no pending work (available = position) to having some:
-- a producer adding items to a caught-up or new row, or a rewind moving
-- the position back of a caught-up one. It is not cleared when the row
-- catches up; it is meaningful while available > position. While a row
-- stays pending its value stays, so now() - pending_since is how long the
-- row has had pending work without interruption: its oldest pending item
-- is at most that old (exactly that old while nothing of it was
-- processed since). A segment (segment_of set) takes its partition's
-- pending_since when it is split off: its items waited from then.
-- Rows pending when this migration runs get the migration's time.
ALTER TABLE {{.Schema}}.tasks ADD COLUMN pending_since timestamptz;
UPDATE {{.Schema}}.tasks SET pending_since = now() WHERE available > position;

-- rewound_items is the sum, over the rewinds of the row (its generation
-- changing), of the pending items each added to the row: (available -
-- position) after it less before it. Processed items over an interval
-- are then exactly (see package backlog): the items added to partitions
-- (the sum of available over rows that are not segments grows by them)
-- plus the items rewinds put back, less the growth of everything pending,
-- whatever splits and segment clean-ups happened in between.
ALTER TABLE {{.Schema}}.tasks ADD COLUMN rewound_items bigint NOT NULL DEFAULT 0;

CREATE FUNCTION {{.Schema}}.tasks_backlog_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.available > NEW.position AND OLD.available <= OLD.position THEN
        NEW.pending_since := clock_timestamp();
    END IF;
    IF NEW.generation <> OLD.generation THEN
        NEW.rewound_items := OLD.rewound_items + (NEW.available - NEW.position) - (OLD.available - OLD.position);
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER tasks_backlog_update BEFORE UPDATE ON {{.Schema}}.tasks
FOR EACH ROW
WHEN ((NEW.available > NEW.position AND OLD.available <= OLD.position)
      OR NEW.generation <> OLD.generation)
EXECUTE FUNCTION {{.Schema}}.tasks_backlog_update();

CREATE FUNCTION {{.Schema}}.tasks_backlog_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.segment_of IS NOT NULL THEN
        SELECT p.pending_since INTO NEW.pending_since
          FROM {{.Schema}}.tasks p
         WHERE p.kind = NEW.kind AND p.partition_key = NEW.segment_of;
    END IF;
    NEW.pending_since := coalesce(NEW.pending_since, clock_timestamp());
    RETURN NEW;
END
$$;

CREATE TRIGGER tasks_backlog_insert BEFORE INSERT ON {{.Schema}}.tasks
FOR EACH ROW
WHEN (NEW.available > NEW.position)
EXECUTE FUNCTION {{.Schema}}.tasks_backlog_insert();

-- Samples of each kind's figures, written by the workers that publish
-- backlog metrics (Reader.Sample): a reader that finds a sample younger
-- than its sampling interval publishes that one instead of scanning the
-- task table, so a fleet costs one scan per interval, not one per worker.
-- Kept for two hours: the processing rate is the change since the sample
-- nearest to a minute before, and the console charts the last hour.
--   pending_items          available - position of rows not quarantined
--   pending_partitions     partitions with such a row with pending items
--   quarantined_items      available - position of quarantined rows
--   quarantined_partitions partitions with a quarantined row
--   oldest_pending         the earliest pending_since of those pending rows
--   added_items            sum of available over rows that are not segments
--   rewound_items          sum of rewound_items over rows that are not segments
--   workers                live workers of the kind
CREATE TABLE {{.Schema}}.backlog_samples (
    kind                   text COLLATE "C" NOT NULL,
    at                     timestamptz NOT NULL,
    pending_items          bigint NOT NULL,
    pending_partitions     bigint NOT NULL,
    quarantined_items      bigint NOT NULL,
    quarantined_partitions bigint NOT NULL,
    oldest_pending         timestamptz,
    added_items            bigint NOT NULL,
    rewound_items          bigint NOT NULL,
    workers                integer NOT NULL,
    PRIMARY KEY (kind, at)
);

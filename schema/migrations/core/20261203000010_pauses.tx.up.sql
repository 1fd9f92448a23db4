-- Pauses: an operator's durable "do not process" on a whole kind or on
-- named partitions of it (partition.Store's Pause and Resume).
--
-- One row per pause: partition_key is the paused partition, or '' for the
-- whole kind, so that a kind's pause covers partitions created after it
-- (nothing is copied onto task rows). A segment is paused with its
-- partition (segment_of). paused_by and reason say who paused it and why;
-- paused_at is when, by the database's clock.
--
-- The claim statements read this table for every candidate (an anti-join
-- on its primary key: a few rows, read through the index), and the
-- heartbeat reports owned rows that are paused so their owners release
-- them after the batch in flight. Nothing on tasks changes: heartbeats and
-- checkpoints stay heap-only updates, and a paused row keeps its place in
-- tasks_claimable, so a resume puts it back in line where it was.
CREATE TABLE {{.Schema}}.pauses (
    kind          text COLLATE "C" NOT NULL,
    partition_key text COLLATE "C" NOT NULL,
    paused_at     timestamptz NOT NULL DEFAULT now(),
    paused_by     text NOT NULL DEFAULT '',
    reason        text NOT NULL DEFAULT '',
    PRIMARY KEY (kind, partition_key)
);

-- The backlog figures (package backlog) count paused work apart: it is
-- not lag the fleet can drain. Samples taken before this migration have
-- none.
--   paused_items       available - position of paused rows not quarantined
--   paused_partitions  partitions (with their segments) that are paused
ALTER TABLE {{.Schema}}.backlog_samples
    ADD COLUMN paused_items bigint NOT NULL DEFAULT 0,
    ADD COLUMN paused_partitions bigint NOT NULL DEFAULT 0;

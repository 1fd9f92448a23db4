-- Ownership history of partitions: one row per claim, takeover, first
-- batch of a claim, release, fence rejection, failure, quarantine and
-- retry. Rows are written by the protocol's own statements (a claim's row
-- in the claim statement, a release's in the release statement...), so
-- the history cannot disagree with the task rows. Workers prune it by age
-- and by count (see distributor.Config.EventRetention).
CREATE TABLE {{.Schema}}.events (
    event_id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at                timestamptz NOT NULL DEFAULT clock_timestamp(),
    partition_key     text COLLATE "C" NOT NULL,
    kind              text NOT NULL,
    -- The claim the event belongs to (for a retry: the version it set).
    version           bigint NOT NULL,
    -- Worker instance that acted; NULL for an operator's retry.
    worker            text,
    -- Takeover: the owner whose lease had expired, and its last heartbeat.
    prev_owner        text,
    prev_heartbeat_at timestamptz,
    position          bigint,
    items             bigint,
    attempts          integer,
    -- First batch after a takeover: the old owner's last heartbeat to this
    -- commit, by the database clock.
    takeover_ms       bigint,
    detail            text
);
CREATE INDEX events_partition ON {{.Schema}}.events (partition_key, event_id);
CREATE INDEX events_at ON {{.Schema}}.events (at);

-- The trace context (W3C traceparent) of the batch that committed the
-- checkpoint, so the next owner's first batch can link to it.
ALTER TABLE {{.Schema}}.tasks ADD COLUMN traceparent text;

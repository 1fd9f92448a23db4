-- How many partitions each worker held at its last heartbeat, written by
-- the heartbeat statement. The fair-share read sums it over the live
-- workers instead of counting their leases in the tasks table.
ALTER TABLE {{.Schema}}.workers ADD COLUMN held integer NOT NULL DEFAULT 0;

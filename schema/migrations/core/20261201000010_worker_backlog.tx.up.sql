-- How many work items the partitions each worker holds have pending
-- (available − position), written by its heartbeats and kept up by its
-- claims and releases as held is. The fair share weighs workers by it: a
-- worker whose held backlog is already its share of all pending work
-- claims no more partitions (a hot segment is not held alongside a
-- count-share of small contracts). No index covers it: heartbeats stay
-- heap-only updates.
ALTER TABLE {{.Schema}}.workers ADD COLUMN backlog bigint NOT NULL DEFAULT 0;

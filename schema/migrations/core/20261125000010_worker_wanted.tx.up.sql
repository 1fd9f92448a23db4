-- How many more partitions each worker would claim (room below its fair
-- share), written by its heartbeats. A worker above its share hands
-- partitions back only when another live worker wants them; a worker that
-- is alive but cannot take more (at its own max-partitions, or not
-- claiming) no longer draws hand-backs that nobody takes, and work left
-- unclaimed while nobody wants more may be claimed beyond the share.
-- No index covers it: heartbeats stay heap-only updates.
ALTER TABLE {{.Schema}}.workers ADD COLUMN wanted integer NOT NULL DEFAULT 0;

-- Segments: a partition with a large backlog can be split into segments,
-- task rows of their own that different workers process at the same time
-- (distributor.Splitter). A segment row names the partition whose items it
-- holds (segment_of) and covers items (position, available] of it, fixed
-- when it is made; it is claimed, heartbeated, fenced, checkpointed and
-- released like any partition. Its key is the partition's key, "#" and its
-- first position, zero-padded (partition.SegmentKey), so a partition's
-- segments sort right after it and in order.
--
-- Nothing that heartbeats or checkpoints change is indexed: segment_of is
-- written once, at the split.
ALTER TABLE {{.Schema}}.tasks ADD COLUMN segment_of text COLLATE "C";
CREATE INDEX tasks_segments ON {{.Schema}}.tasks (kind, segment_of) WHERE segment_of IS NOT NULL;

-- A split partition's checkpoint moves past the items of its segments at
-- once (its position is where work added later starts), so a partition's
-- progress is its own row's and its segments' together. partition_progress
-- gives it for every partition that is not itself a segment:
--   done_through  items up to here are all processed (the least of the
--                 row's position and the positions of segments not
--                 caught up): the processed prefix
--   pending       items not processed yet, the row's and its segments'
--   segments      segments not caught up
-- Readers that took a row's position for "processed up to" read
-- done_through instead; for a partition never split they are equal.
CREATE VIEW {{.Schema}}.partition_progress AS
SELECT t.kind, t.partition_key, t.available, t.position,
       least(t.position, coalesce(s.first_pending, t.position)) AS done_through,
       (t.available - t.position) + coalesce(s.pending, 0) AS pending,
       coalesce(s.segments, 0) AS segments
  FROM {{.Schema}}.tasks t
  LEFT JOIN LATERAL (
        SELECT min(g.position) AS first_pending, sum(g.available - g.position) AS pending, count(*) AS segments
          FROM {{.Schema}}.tasks g
         WHERE g.kind = t.kind AND g.segment_of = t.partition_key AND g.position < g.available) s ON true
 WHERE t.segment_of IS NULL;

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

package taskstore

// Pauses (the pauses table; partition.Store's Pause and Resume).
//
// A paused partition, a segment of one, or any partition of a paused kind
// is never claimed: notPausedT is part of every statement that reads
// candidates or claims them (candidatesSQL, staleRows, fairShareSQL,
// Claim, fenceUnownedGroupSQL, claimAdvanceGroupSQL), so a claim whose
// snapshot sees the pause cannot win the row, whatever read found it. It
// is an anti-join on the pauses table's primary key, one index probe per
// row read, so the claim's cost follows the rows it reads, as before;
// a paused row keeps its place in tasks_claimable and is walked, not
// claimed, by each read that reaches it (a few rows: pauses are an
// operator's, not the workload's).
//
// A claim whose snapshot predates the pause's commit may still win the
// row. The heartbeat reports every owned row that is paused (pausedT),
// and the owner releases it at its next batch boundary: the batch in
// flight commits or rolls back whole, fenced as any batch, and the row is
// released within one heartbeat of the pause, at its checkpoint.

// pausedT is true when the task row aliased t is paused: its partition
// (for a segment, the partition it belongs to) or its kind.
const pausedT = `EXISTS (SELECT 1 FROM {{.Schema}}.pauses p WHERE p.kind = t.kind
	           AND p.partition_key IN ('', coalesce(t.segment_of, t.partition_key)))`

// notPausedT is true when the task row aliased t is not paused.
const notPausedT = `NOT ` + pausedT

package taskstore

// Pauses (the pauses table; partition.Store's Pause and Resume).
//
// A paused partition, a segment of one, or any partition of a paused kind
// is never claimed: notPausedT is part of every statement that reads
// candidates or claims them (candidatesSQL, staleRows, fairShareSQL,
// Claim, fenceUnownedGroupSQL, claimAdvanceGroupSQL), so a claim whose
// snapshot sees the pause cannot win the row, whatever read found it. It
// is an anti-join on the pauses table's primary key, one index probe per
// row read (or one hash of the few pauses), so the claim's cost follows
// the rows it reads, as before; the reads of a kind's claimable rows
// check the kind's own pause once, before reading (kindNotPaused);
// a paused row keeps its place in tasks_claimable and is walked, not
// claimed, by each read that reaches it (a few rows: pauses are an
// operator's, not the workload's).
//
// A claim whose snapshot predates the pause's commit may still win the
// row. The heartbeat reports every owned row that is paused (pausedT),
// and the owner releases it at its next batch boundary: the batch in
// flight commits or rolls back whole, fenced as any batch, and the row is
// released within one heartbeat of the pause, at its checkpoint.

// partitionNotPausedT is true when the task row aliased t is not paused by
// name: neither its partition nor, for a segment, the partition it
// belongs to. An equality on the pauses' key, so the planner probes the
// primary key per row, or hashes the few pauses once.
const partitionNotPausedT = `NOT EXISTS (SELECT 1 FROM {{.Schema}}.pauses p
	           WHERE p.kind = t.kind AND p.partition_key = coalesce(t.segment_of, t.partition_key))`

// notPausedT is true when the task row aliased t is paused neither by name
// nor with its kind.
const notPausedT = partitionNotPausedT + `
	  AND NOT EXISTS (SELECT 1 FROM {{.Schema}}.pauses p WHERE p.kind = t.kind AND p.partition_key = '')`

// pausedT is true when the task row aliased t is paused, by name or with
// its kind.
const pausedT = `NOT (` + notPausedT + `)`

// kindNotPaused is true when kind k (a parameter) is not paused: it names
// no row, so the server evaluates it once per statement (a one-time
// filter), and a paused kind's reads stop before reading the index
// instead of walking every claimable row to reject each.
func kindNotPaused(k string) string {
	return `NOT EXISTS (SELECT 1 FROM {{.Schema}}.pauses WHERE kind = ` + k + ` AND partition_key = '')`
}

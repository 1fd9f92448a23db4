// Package backlog reads the fleet's backlog signals from the task table,
// per kind: how much work is pending, how long it has waited, how fast it
// is processed, when it will be drained and how many workers would drain
// it within a target. They are what an operator watches during a run and
// what an autoscaler scales the workers on.
//
// # The figures
//
// All are read by one statement (ReadBacklog in internal/taskstore) over
// the task rows of every kind (partitions and the segments split off
// them) and the live workers, at one instant (At, the database clock):
//
//   - PendingItems: available − position summed over the kind's task rows
//     that are neither quarantined (failed_at unset) nor paused, segments
//     included. Each
//     item not yet processed is counted once: a split partition's own row
//     moves past the items of its segments, which count them. Rows backing
//     off after a failure count (they are retried without an operator).
//   - PendingPartitions: partitions with at least one such row with
//     pending items (a partition and its segments count once).
//   - QuarantinedItems, QuarantinedPartitions: the same over quarantined
//     rows, which wait for an operator's retry and are not in the pending
//     figures. A partition with one segment quarantined and another
//     pending counts in both.
//   - PausedItems, PausedPartitions: work an operator paused
//     (partition.Store's Pause: the partition, its segments, or every
//     partition of a paused kind) is not in the pending figures, nor in
//     Lag, DrainTime and WorkersNeeded: no number of workers drains it
//     until it is resumed, so it must not make an autoscaler start
//     workers. PausedItems is available − position over paused rows that
//     are not quarantined (a quarantined paused row counts as
//     quarantined); PausedPartitions counts the paused partitions that
//     exist, with pending work or not (a pause of a partition with no
//     task row yet counts once its first work arrives). The processed
//     count below takes paused items in with pending and quarantined
//     ones, so a pause or a resume is not processing.
//   - Lag: At − the earliest pending_since of a pending row that is not
//     quarantined nor paused, 0 when none is pending. A row's pending_since is the
//     time it last went from no pending work to some (kept by a trigger,
//     so every writer keeps it right; a segment inherits its partition's),
//     so Lag is the longest time a partition has had pending work without
//     interruption: an upper bound on the age of the oldest pending item,
//     equal to it while that partition has processed nothing since.
//   - Rate: items processed per second over the last RateWindow (one
//     minute by default): the items processed between a stored sample of
//     the totals and now, divided by the time between them. Processed
//     items are counted from totals that splits and segment clean-ups do
//     not change: items added (the sum of available over rows that are
//     not segments) plus items rewinds put back (rewound_items, kept by a
//     trigger) less the growth of everything not processed (pending,
//     quarantined and paused items). So a split, a quarantine or a retry is not
//     processing, and a rewind is not negative processing. (One case is
//     not exact: a rewind of a partition whose segments are not caught
//     up deletes them, and their items count as processed in the windows
//     that span it.) The sample used is the stored one nearest to
//     RateWindow ago, at least MinRateWindow old and at most two windows
//     old; without one the rate is unknown (RateKnown false).
//   - Workers: live workers of the kind (registration not expired, not
//     stopped), whether or not they hold anything.
//   - DrainTime: PendingItems / Rate; 0 when nothing is pending, unknown
//     (Drains false) when the rate is unknown or 0 while work is pending.
//   - WorkersNeeded: how many workers would drain PendingItems within
//     DrainTarget at the rate each worker has processed over the window
//     (Rate / the mean live-worker count of the samples in the window):
//     ceil(PendingItems / (per-worker rate × DrainTarget)). 0 when nothing
//     is pending; when the per-worker rate is unknown or 0 with work
//     pending, the current worker count, and at least 1, so that a fleet
//     scaled to zero starts one worker and learns its rate.
//
// Samples are written by the readers that record (Reader.Sample: the
// Publisher of a worker serving metrics, or "worker signals"): a recording
// reader that finds a sample of any kind younger than SampleEvery
// publishes the newest samples as they are (At is then their time) and
// does not read the task table; otherwise it computes the figures and
// stores them. So a fleet of any size scans the task table about once per
// SampleEvery, whichever worker comes first, and every worker publishes
// the same figures, at most SampleEvery old. Samples are kept for two
// hours (the console charts the last one). Readers that do not record
// (status) always compute the figures, and take the rate's reference from
// the samples the publishers stored.
//
// # Cost
//
// Computing the figures scans the task table once (nothing that a
// checkpoint changes is indexed, so that checkpoints stay heap-only
// updates) and reads a few samples by primary key; publishing a fresh
// sample reads the samples only. It never runs on the claim path: the
// Publisher runs it on an interval of its own. The bench
// (BenchmarkBacklogStatement) measures it at 100,000 partitions, with
// and without a pinned xmin horizon.
package backlog

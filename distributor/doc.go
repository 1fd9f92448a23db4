// Package distributor runs work partitions across any number of worker
// processes that share one PostgreSQL database and nothing else.
//
// Work is split into partitions, one task row each (table tasks, in baton's
// own PostgreSQL schema, Config.Schema, created by schema.Migrate). Producers
// append work items and raise the row's available counter; a Processor
// consumes them in order and commits its output together with the new
// checkpoint position. The distributor guarantees that at any moment at
// most one worker can commit for a partition, and that when a worker dies
// another one resumes exactly at the last committed checkpoint.
//
// Every partition has a kind, the processor it belongs to, as a job's kind
// names its queue (Config.Kind; a Kinded Processor names its own). Several
// processors may share one schema, with partitions of the same names: a
// partition is (kind, partition_key), and a worker claims, renews, fences,
// advances, releases and counts (for its fair share) task rows and workers
// of its own kind only, so one processor can never claim, advance or add
// to another's work.
//
// Embedding: open the database with dbconn.Open, or describe a handle you
// opened with dbconn.Wrap (pooled or direct, a direct ListenURL, the
// timeouts of baton's transactions), apply the core migrations
// (schema.Migrate, over a direct handle), add work inside
// your own transactions with partition.Store.AddWork on a store of your
// kind (it locks the task row in the protocol's order, returns the numbers
// the new items take, and notifies the workers at commit), implement
// Processor, then
//
//	orders := partition.NewStore(db, "").Kind("orders")
//	r, err := orders.AddWork(ctx, tx, customer, n) // in the service's transaction: items r.First … r.Last
//	d, err := distributor.New(db, myProcessor, distributor.Config{Name: "billing", Kind: "orders"})
//	err = d.Run(ctx) // until ctx is cancelled; then hands everything back
//
// # Guarantees
//
// At most one worker can commit for a partition at any time: a claim is a
// compare-and-set on the task row's version, and every batch commits its
// output in the same transaction as its checkpoint, fenced by that version,
// so a paused or cut-off former owner can never commit. Within a
// generation, committed checkpoints never go backwards or skip. When a
// worker dies, another resumes at the last committed checkpoint within
// StaleAfter + PollInterval + Confirm × Heartbeat + one batch of the crash
// (with a survivor below MaxPartitions); a graceful stop hands partitions
// over at once. A dead worker's partitions spread over the survivors at
// the takeover: each takes its fair share of them, recomputed when it finds
// them, and leaves the rest to the others (Config.SpreadTakeovers bounds
// how long a part left to a live worker that does not take it waits), so
// none is confirmed by one survivor only to be handed back to another. A
// claim group may carry riders beyond MaxPartitions (riders.go): small
// partitions fenced, processed and claimed by the group's own statements,
// so they lock what any member locks at the same steps, and released by
// its commit whether or not their first batch caught them up, so no
// worker holds more than MaxPartitions. All times that decide ownership are the database's now();
// a worker's clock only ever makes it stop earlier. Output written in the
// database is exactly once; side effects outside it are at least once
// (Batch.IdempotencyKey).
//
// # Pauses
//
// An operator may pause partitions, or a whole kind (partition.Store's
// Pause): a paused partition and its segments are never claimed, by any
// statement that reads or claims candidates (the pause is part of the
// statement, read under its snapshot, not a check made before it). A
// pause is an input to claiming and renewal, not a change of ownership: it
// locks no task row. A claim that committed before the pause was visible
// to it is an ordinary claim; the heartbeat reports the pause with the
// lease, and the owner releases the partition at its next batch
// boundary, so the batch in flight commits (or rolls back) whole with its
// checkpoint and the release, within one heartbeat, is the ordinary fenced
// release. Resume notifies the workers with the time the rows became
// claimable, so they read the claimable rows from below it (the claim
// floor) and claim them at once.
//
// # A processor's own locks
//
// A batch's transaction holds its task row (the fence) from its start. A
// processor that locks rows of its own in it (Batch.Tx) takes them after
// that row, never the other way round, and whoever else locks those rows
// and task rows in one transaction takes the task rows first, so no cycle
// forms with the protocol's lockers. Pricing does: the last batch of each
// piece of a contract's generation being priced (its partition, or a
// segment) locks the generation's row to decide, against the other
// pieces' checkpoints, whether it is the last and switches the contract
// to it (a preview's pieces lock it too, and switch nothing unless an
// approval made the preview a generation being priced meanwhile); a
// re-pricing that abandons that generation, and a discarded preview,
// take it after their rewinds hold the contract's task rows, segments
// included, and an approval takes it after the contract's own task row,
// before it reads the pieces' checkpoints. A group's
// members that are their contracts' only pieces switch in one statement
// for them all (recording the starts of the generations whose first
// batch this is; the other members' starts take one statement after),
// locking those rows in whatever order the statement reaches them: every
// task row of those contracts is held by the group's fence, so no other
// batch and no re-pricing (which takes the task rows first) can hold one
// of them meanwhile. A generation's first batch is its partition's,
// before any segment of it exists, so no other piece's batch contends
// for the row whose start it records.
//
// The protocol in full (the task row, claims, fair shares, confirmation,
// the fence, pauses, states, the takeover bound, the claim floor,
// PostgreSQL versions, where each step lives in this package) and the
// safety argument are in docs/protocol.md in the repository.
package distributor

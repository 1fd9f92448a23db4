// Package partition is baton's task table seen from outside the workers:
// the rows that say which worker owns which partition of work, how much
// work each has and how far it has got. Producers use it to add work;
// operators and services use it to see and repair the state of the work.
// The statements the distributor runs on these rows (claim, renew, fence,
// advance, release) are internal; the types they share with their callers
// (Lease, Checkpoint, the events) are
// here; the notifications' wire format is internal.
//
// # Partitions and work items
//
// A partition is one row of baton.tasks, keyed by (kind, partition_key):
// the kind names the processor the work is for (as a queue name does), the
// key names the stream of work within it (a contract, a customer, a
// tenant). A partition's work is a sequence of items numbered 1, 2, 3…
// that the producer stores in its own tables; the task row holds only two
// counters: available, the highest item number made available, and
// position, the number of items processed (the checkpoint). Pending work
// is available − position. A processor reads items position+1 … available,
// in order, and commits the new position with its output.
//
// # Adding work
//
// A Store is bound once to baton's handle, a schema and a kind
// (NewStore(db, "").Kind("orders")). It adds work with AddWorkTx (one
// partition) or AddWorksTx (several in one statement) inside the
// producer's own transaction (a bun.Tx begun on the handle), so the items
// and the work counter commit or roll back together; AddWork and AddWorks
// do the same in a transaction of their own. The partition is created on
// first use. AddWorkTx returns the numbers the new items take (Range): the producer writes its
// items under them in the same transaction. The statement holds the task
// row's lock until the transaction ends, so producers of the same partition
// running at once are numbered one after the other, never the same. The
// kind's workers are woken by a notification delivered at commit, which
// also says when the statement ran: workers read claimable partitions from
// a floor that moves with time (by default ten seconds below the earliest
// claimable partition their last read found), and a partition made
// claimable long before its transaction commits is found from that time.
// Where no notification reaches the workers (through a transaction pooler
// without a listen connection, or for task rows written by hand-written
// SQL in a transaction that stays open past that margin), such a partition
// waits for a worker's next read from the start, at most the worker's
// full-read interval (distributor.Config.FullReadInterval, 30 seconds by
// default) after its commit.
//
// # Seeing and repairing
//
// Status lists the kind's partitions (state, owner, processed, pending,
// last error) and workers; History and RecentEvents read a partition's
// history of claims, takeovers, hand-backs, failures and retries (table
// events), which the workers prune. Progress re-reads a partition's
// version and position. Retry re-enables a partition that failed
// too often (quarantined) or is backing off.
//
// # Pausing
//
// Pause stops named partitions, or the whole kind, from being processed
// until Resume: they are never claimed, and a worker that owns one
// releases it at its next batch boundary, within a heartbeat. Work is
// still accepted and waits. Paused lists the pauses in force (see
// pause.go for the details).
//
// # Processing again: generations
//
// RewindTx (in the caller's transaction; Rewind in one of its own) makes partitions process their
// items again from a given position, with the processor state a batch
// ending there would have committed, under a new generation of their
// output: for example to re-price a contract after its tiers changed, from
// the start, or after a corrected record, from that record on. It runs in
// the caller's transaction, so whatever the processor records about the
// new generation commits with it. The rewind fences out the claim that was
// processing the previous generation (its next write fails, as after a
// takeover), and batches see their generation in Checkpoint.Generation, so
// a processor that keeps output per generation never mixes them.
// docs/protocol.md gives the safety argument.
//
// # The protocol's statements
//
// The statements that claim, renew, fence, advance, release and fail
// partitions, and the fair-share and claim-floor reads, are the
// distributor's and not part of this package: they are internal to baton
// (internal/taskstore), held to a conformance suite shared with the
// simulator's model. Each names its kind and locks task rows in (kind,
// partition_key) order, with the lock modes Store's documentation lists; a
// producer that writes task rows itself must follow the same rules, and
// should use AddWorkTx instead.
package partition

// Package sim is a deterministic simulation of baton's work-distribution
// protocol: many workers following the algorithm of packages distributor
// and heartbeat, against a model of the task table with the same
// compare-and-set, lease and fencing semantics as taskstore.Store's SQL, on
// a virtual clock, under injected faults. Invariants are checked at every
// step, over thousands of random schedules in seconds.
//
// Everything is driven by one seeded PRNG and a discrete-event scheduler
// (a priority queue on virtual time; ties run in scheduling order), with no
// goroutines, so a seed reproduces a schedule exactly:
//
//	r := sim.Run(sim.RandomConfig(seed)) // r.Violation is nil or the first failure
//
// # What is modelled
//
// The database. Task rows (version, owner, lease_expires_at by the database
// clock, available, position, attempts, quarantine) and the workers table
// (registration, stop mark, and the held and wanted counts the fair share
// reads). A row is stale only when its lease has ended and its owner is not
// live (decide.Stale); a live worker's row past its lease is handed back
// by that worker's next heartbeat, which also rewrites only the leases
// below the renewal threshold and returns the others fresh.
// Statements are those of taskstore.Store, with their row locks and
// PostgreSQL's conflict table: the fence takes FOR KEY SHARE, which
// conflicts only with FOR UPDATE; claims, releases, failures and operator
// retries take FOR UPDATE (claims with SKIP LOCKED); heartbeats, the
// checkpoint update and producers take FOR NO KEY UPDATE. A statement that
// waits for a lock re-checks its conditions on the row as locked (READ
// COMMITTED's EvalPlanQual) and gives up after lock_timeout or
// statement_timeout; now() is the statement's start. Writes become visible
// at commit, after a commit latency that a stall (WAL fsync, synchronous
// replication) can stretch, and keep their locks until then. Sessions run
// statements in order; an explicit transaction idle longer than
// idle_in_transaction_session_timeout is ended and its locks released
// (the client later sees SQLSTATE 25P03 or a dead socket); a restart ends
// every session (a commit in flight survives or not) and refuses
// connections for a while.
//
// The network. Each connection delivers in order in each direction, with
// random delays and a long tail. A partition between one worker and the
// database either holds traffic until it heals (TCP retransmits; it may
// then be reset) or slows it down. A reset (RST) fails the client's call at
// once, drops whatever is undelivered, and may or may not reach the server.
// As with pgx's default context watcher, a client that gives up on a
// statement only closes its socket: the statement keeps running on the
// server (waiting for locks, committing) and the session ends afterwards.
//
// The workers. Each has a monotonic clock running within ±Drift of the
// database clock. Faults: crash (for good; the kernel may or may not close
// its sockets; a supervisor starts a new instance later), SIGSTOP (frozen;
// its clock runs on; on resume, steps that came due run in random order, as
// goroutines and timers race after SIGCONT, so a batch may issue one more
// statement before its expired lease is noticed), suspend (frozen, and its
// clock stops too: its local deadlines are then worthless, only the fence
// protects), network partition, connection reset, graceful stop (release
// after the batch in flight, ShutdownTimeout, abandon). Work arrives from
// producers; an operator re-enables quarantined partitions.
//
// The algorithm, step by step as the real code does it, making every
// decision through the functions the real code calls (internal/decide:
// the fair share and hand-back, what a worker wants, which candidates it
// picks and how many it reads, the renewal threshold and the time a lease
// has left, the local deadline, confirmation, back-off and quarantine, the
// transient-retry limit): registration; the
// claim loop (the fair-share load, FairShareLoad's, every RebalanceInterval
// or StaleAfter/2 with room, hand-back
// of surplus partitions to workers that want them, and of a leader's idle
// partitions while work it has no room for waits, work beyond the share
// once nobody else has wanted it for a lease's length, stale candidates
// first, then the head of the claimable index,
// shuffled with the stale ones ahead, claimed in at most two compare-and-set rounds, a claim whose
// outcome is unknown resolved by re-reading and adopting what it won, a
// failed round retried after a back-off, woken by polls and notifications; after a notification of
// work added or retried a worker with room recomputes its share, at most
// once a heartbeat, and claims nothing while the recompute is owed; after
// one of a worker's stop mark it recomputes at once; a release's only
// wakes it; a worker at its share still takes dead workers' partitions,
// read as stale candidates, up to MaxPartitions; a share computed with no
// work in sight is recomputed before claiming; with Config.ClaimWithBatch,
// as implemented, an unowned candidate is claimed inside its first batch's
// transaction instead: the fence of the unowned row (FOR KEY SHARE SKIP
// LOCKED plus the advisory lock, not waited for), processing, the claim
// and checkpoint compare-and-sets (FOR UPDATE SKIP LOCKED) with the release
// when caught up in lock mode, commit, bounded by StaleAfter − SafetyMargin;
// a lost race or rollback leaves the row as it was, a processor error is
// recorded under a claim of its own, and a first batch too long for a
// lease falls back to one); the heartbeat service (one batched renewal per tick over
// a pinned connection, replaced after an unknown outcome, which is resolved
// by re-reading the leases; streaks and confirmation; local deadline = send
// time of the last successful renewal + remaining lease − SafetyMargin); the
// partition loop (confirmation wait for takeovers; fenced batch: fence,
// processing time, output write, checkpoint update, commit, and on an
// unknown commit outcome the re-read of resolveCommit; transient retries
// while the lease holds; release when caught up in lock mode, wait for work
// in leader mode; failure with back-off and quarantine); segments, with
// Config.SegmentRecords (a Splitter processor; a third of the random
// schedules): a held partition's batch that finds more than 2 ×
// SegmentRecords items pending on a partition that is not a segment
// chooses split points by the pricer's rule (SplitChunk boundaries) and,
// instead of processing, writes one segment row per segment
// (taskstore.Store.Split: rows visible to other transactions only once it
// commits, in key order, an insert of a key another transaction is
// inserting waiting for it and failing with a unique violation if it
// commits, which movedOr turns into a moved checkpoint; the partition's
// finished segments that nobody holds deleted FOR UPDATE SKIP LOCKED) and
// moves the checkpoint past them with the usual compare-and-set, all at
// commit or not at all; segment rows get no producer work, are claimed,
// processed and released like partitions, and are released once caught
// up in either mode; graceful stop (the
// claim loop ends, the worker marks itself stopped, and only then are its
// partitions released, after their batch in flight).
//
// # Invariants
//
//  1. Single writer: every batch commits under the partition's current
//     version, by the owner of that version, at the moment of commit.
//  2. Checkpoints never go backwards, and each commit advances the
//     checkpoint by exactly the number of items it wrote.
//  3. Exactly once: each commit's items follow its row's output log with
//     no gap, and no item of a partition is committed twice, whichever of
//     its rows (the partition's own or a segment's) commits it: a ledger
//     per partition item; a split's segments cover exactly the items its
//     checkpoint moves past. Once faults stop, all available work is
//     processed, every item of every partition committed exactly once
//     (liveness: a schedule fails if no batch commits for Drain while
//     work is pending).
//  4. Local deadline: a worker never writes inside a batch after the local
//     deadline of its lease (except the one statement a resumed worker may
//     issue, counted as Result.LateWrites), and when a claim takes a row over
//     from a live owner, that owner's local deadline has already passed by
//     its own clock (unless its clock stopped in a suspend): the safety
//     margin covers drift.
//  5. Versions only increase: every change of ownership bumps the version,
//     so each version names one claim.
//
// Mutations (Config.Mutation) break the protocol on purpose — no fence, a
// claim without compare-and-set, no safety margin, no idle-in-transaction
// timeout, work added to segments — and the tests check that the checker
// then finds a violation.
//
// Throughput: with Config.ItemTime a worker's processor runs at a fixed
// rate, one batch at a time, and TestThirtyTwoWorkersOnOneHugeContract
// checks that 32 workers finish one contract of 100,000,000 records,
// split into segments, within 1.25 × the time a perfect share would take.
//
// # What is not modelled
//
// The SQL itself: the model implements the statements' semantics, and the
// store's conformance suite (below) checks them against the real statements
// on PostgreSQL. Also left out: MVCC
// snapshots beyond row-level re-checks, the deadlock detector (lock orders
// make deadlocks impossible here; the model's rows are ordered by their
// index, segments after every partition, a total order all its multi-row
// statements follow as the real ones follow key order), rewinds in the
// schedules (the store has the rewind's statement, partition.Store.Rewind:
// the partition locked FOR UPDATE first, then its segments, found only
// once it is held, locked and deleted, a new generation and version; the
// conformance suite sends it, the simulated workers never do), the
// checkpoint states segments start from
// (the Splitter's contract), the sharing of segments by their pending
// items (distributor's withinBacklogShare and, once a worker's backlog is
// its part, its reading the claimable head for segments only: simulated
// workers share them by count, and one at its part claims none), the
// distributor's batch sizing by time
// (BatchTarget: batches take BatchSize items), server-side TCP keepalives, pool size
// limits, the LISTEN connection's own failures (a notification reaches every
// worker not cut off), output tables' unique keys (the model's output log
// has none, so a duplicate is reported rather than turned into a failed
// batch), storage loss and replica failover (a committed write is never
// lost), and wall-clock steps (only monotonic clocks matter).
//
// Claims in groups (distributor.Config.ClaimGroup) are modelled as lone
// claims with their first batches (whose statements are a group of one in
// taskstore.Store, held to the model by the ClaimWithBatch cases of the
// conformance suite; its ClaimGroup cases run the group statements on
// PostgreSQL and, on the model, as lone fences and claims run back to
// back in key order and committed together). The model's heartbeat waits
// for a locked row, as the store's retry of a skipped row does, rather than
// reporting it Locked. A group's transaction does to each
// member's row exactly what a lone claim's does (the same predicates and
// lock modes, taken in key order by statements that never wait), so every
// interleaving with another transaction that a member sees is one a lone
// claim sees; what differs is only that members commit, or roll back,
// together, and each member's outcome is then one of a lone claim's: its
// claim, output, checkpoint and release all committed at one instant, or
// all rolled back (after which it is claimed on its own, as the model's
// fall-backs already are).
//
// Held groups (several held partitions' batches in one transaction,
// distributor.GroupProcessor) are modelled as lone batches likewise. The
// group runs, for each member, the lone batch's own statements (Fence,
// Advance, and the release with the last batch) in partition_key order
// on one connection; the conformance suite's HeldGroup cases run them so
// on PostgreSQL and, on the model, as lone batches committed together. A
// member lost at the fence drops out exactly as a lone batch's fence
// fails; every other member's row sees what a lone batch of it would
// (the same statements, predicates and lock modes, the locks taken in key
// order), so each member's outcome is a lone batch's: output, checkpoint
// and release committed at one instant, or rolled back (after which the
// member runs its batch alone, as a lone batch's retry does). Only the
// instant is shared; no invariant the model checks relates two partitions.
//
// # Running and replaying
//
//	go test ./internal/sim                                   # ~1200 schedules, new base seed each run
//	BATON_SEED=<seed> go test ./internal/sim -run TestSimulatedSchedules -v
//	go test ./internal/sim -long                             # soak: 100 × more (or BATON_SIM_LONG=1)
//	BATON_SIM_LONG=1 BATON_SIM_DURATION=2m go test ./internal/sim -run TestSimulatedSchedules -v -timeout 0
//
// Every test logs its base seed; schedule i runs seed base+i. A failure
// prints the violation (seed, event index, virtual time, invariant), the
// schedule's configuration, a trace of the steps concerning the partition,
// and "replay with BATON_SEED=<seed>". Config.Trace records the full
// trace of a schedule.
//
// # The model is held to the store's contract
//
// The model store runs the same conformance suite as taskstore.Store on
// PostgreSQL (package internal/storetest): TestModelStoreContract here,
// TestStoreContract in package taskstore. A model statement that drifts
// from the SQL fails a case; TestBrokenModelStoresFailTheContract checks
// that the mutations above do. TestSplitConformance runs the split's
// cases (commit, rollback, a second split of the same items, at once or
// waiting for the first, a later split deleting finished segments) on
// the model and on taskstore.Store over PostgreSQL and compares every
// step's outcome and the task rows.
//
// # Found by the model: unknown commit outcome
//
// The model found a duplicate in an earlier protocol. When a batch's COMMIT
// reaches the server but the client then sees a connection error while the
// server is still committing (a commit stall), resolveCommit re-reads the
// checkpoint, sees the old position and reports "not applied"; the batch is
// retried under the same lease, its fence (FOR KEY SHARE) does not conflict
// with the first transaction's locks, so it reads the old checkpoint, and
// its checkpoint update, which then compared only the version, committed
// the same items a second time. The checkpoint update now also compares the
// position read under the fence (taskstore.Store.Advance; a mismatch is the
// transient ErrCheckpointMoved), which Config.AdvanceCAS models and the
// default schedules run with. TestUnknownCommitOutcomeRace keeps the race
// reproducible with AdvanceCAS off.
package sim

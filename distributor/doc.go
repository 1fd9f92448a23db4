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
// your own transactions with partition.Store.AddWorkTx on a store of your
// kind (it locks the task row in the protocol's order, returns the numbers
// the new items take, and notifies the workers at commit), implement
// Processor, then
//
//	orders := partition.NewStore(db, "").Kind("orders")
//	r, err := orders.AddWorkTx(ctx, tx, customer, n) // in the service's transaction: items r.First … r.Last
//	d, err := distributor.New(db, myProcessor, distributor.Config{Name: "billing", Kind: "orders"})
//	err = d.Run(ctx) // until ctx is cancelled; then hands everything back
//
// # The task row
//
//	kind              the processor the partition belongs to (Config.Kind)
//	partition_key     the partition, unique within its kind
//	version           bumped by every change of ownership
//	owner             worker instance (name#suffix) or NULL
//	heartbeat_at      last renewal, database clock
//	lease_expires_at  when the row may be claimed: while unowned, the time
//	                  it became claimable (set by the server's trigger
//	                  tasks_claimable_since, whoever wrote the row) or
//	                  the end of a back-off; heartbeat_at + the owner's
//	                  stale_after while owned
//	available         work items produced (high-water mark)
//	position          work items processed (the checkpoint)
//	checkpoint        processor state committed with position
//	attempts, last_error, failed_at   failure bookkeeping
//	claimable_at      computed by the server: lease_expires_at of an
//	                  unowned row with pending work, not quarantined;
//	                  NULL otherwise (the claimable index's key)
//
// No index covers a column that a heartbeat (heartbeat_at,
// lease_expires_at) or a checkpoint (position, checkpoint, traceparent,
// updated_at) changes, and the table leaves room in its pages (fillfactor
// 70): those updates are heap-only (HOT), so they add no index entry, and
// their old versions are pruned page by page. While a long transaction
// elsewhere holds an old snapshot nothing can be pruned or vacuumed, and
// every index entry made meanwhile stays, to be walked by every scan that
// meets it: only changes of ownership (claims, releases, failures) add
// index entries, and no statement a worker runs at every beat or poll
// scans entries of other workers' live leases. The owner index keeps an
// entry for every version that named an owner, so under such a snapshot
// an owner's range in it grows with every claim it makes: statements that
// know their rows' keys (fence, renewal, release, failure, re-read) read
// them by the primary key and never through that index, whatever the
// planner's statistics say; only a heartbeat's look for its own rows it
// does not list, and the look for a dead worker's rows, use it. The
// claimable index gains an entry whenever a row becomes claimable, and
// the entry dies when the row is claimed; since a row's key is the time
// it became claimable and the earliest are claimed first, the dead
// entries lie below the live ones, and a worker reads the index from a
// floor (Config.FloorMargin, ten seconds by default, below the earliest
// claimable row its last read found) instead of from the start: a read
// walks the entries of the last moments' claims, not all those a held
// snapshot keeps. The floor only chooses where a read starts; nothing
// about ownership depends on it (a claim is a compare-and-set on the row,
// whatever read found it), and a row it passes over is read within a
// bound (The claim floor, below); an until-done run looks for pending
// work from the start before it says all work is done.
//
// All times that decide ownership are the database's now(); a worker's
// clock only ever makes it stop earlier.
//
// # Protocol
//
// Kinds. Every statement below names the worker's kind: candidates are
// read from the kind's own range of the claimable index (its first
// column), and every claim, fence, compare-and-set, renewal, release,
// failure, retry and history row matches (kind, partition_key), never the
// key alone. Producers add work under a kind (partition.Store.Kind), and
// notifications carry it, so workers ignore other kinds' work and
// departures. The workers table records each worker's kind, and the fair
// share counts the live workers and the work of the worker's kind only.
//
// Claim. A worker reads claimable rows of its kind: unowned ones from the
// head of the claimable index (claimable_at <= now(): pending work, not
// quarantined, no back-off left; from the worker's floor, above), earliest
// claimable first, and stale ones (below), and shuffles a
// window of them so that workers polling together spread out, and claims several in one compare-and-set statement: version
// = version + 1 where the row is still of its kind, version is still the
// value read and the row is still claimable, under FOR UPDATE SKIP LOCKED.
// A row returned is won; a row not returned went to someone else. The
// poll's cost follows the claims made, not the number of partitions (nor
// other kinds' partitions). It claims up to its fair share: ceil(busy
// partitions / live workers) of its kind, at most MaxPartitions, except
// that a dead worker's partitions are taken beyond the share (see Takeover
// bound). The share's inputs are the live workers' rows of its kind, each
// carrying how many partitions its worker
// holds (written by its heartbeats, and changed by its claims and releases
// in their own statements), the leases of workers that stopped within the
// last StaleAfter and have not released them yet, and the claimable rows,
// counted from the head of the claimable index only up to what live
// workers × MaxPartitions leaves. So the read costs the same with 100,000
// partitions as with 100, and with 1,000 workers it reads their rows but
// none of their leases. A stale row is one whose owner is not live (its
// registration in the workers table expired, or it stopped) and whose own
// lease has ended: it is found through its owner, reading the workers
// table (one row per instance) and, through the owner index, the rows of
// the instances that are not live, never the leases of live ones. No index
// covers the lease itself, which heartbeats renew. Every owner has a
// worker row (a claim registers an owner that never heartbeated, as not
// live; a dead worker's row is kept while it owns task rows). The share is recomputed
// every RebalanceInterval, and sooner (at most once a heartbeat) when a
// notification says work was released, loaded or retried, or that a worker
// joined (its first heartbeat, which inserts its row, notifies at its
// commit), and at once when one left. A worker at its share still polls,
// for stale rows only.
//
// Shares weighted by backlog. Partitions are not equal: a hot segment of
// 100,000 records and a contract of 1,000 count the same in busy / live. So
// each worker row also carries its backlog, the items its partitions have
// pending (available − position), written with held by the same heartbeat
// statement (no extra statement per beat) and changed with held by claims
// and releases; the load read sums the live workers' backlogs, the leaving
// workers' leases' and the claimable rows' it counts (a lower bound past
// the count's cap). A worker whose own backlog is at least ceil(backlog /
// live workers) holds its share of the work and claims no more partitions
// (its share is what it holds), so the holder of a hot segment leaves the
// small contracts to the others. Between load reads the worker knows its
// own backlog at each claim and commit (a claim moves the claimed row's
// items from the others' backlog to its own), so a claim of a hot segment
// stops its claiming at once. The weighting only ever lowers the share to
// what is held: it never hands a partition back (the count share alone
// does that), so no partition bounces between workers over backlog, and it
// changes nothing that the safety argument rests on (who may claim what is
// still the compare-and-set). Work that no other worker wants is still
// taken by overflow, after a lease's length. A worker alone is not
// weighted.
//
// Claim with the first batch. A candidate nobody owns (never owned, or
// released) needs no confirmation, so it is not claimed by that statement
// but in the transaction of its first batch, one per partition, as many at
// once as the worker has room for: the batch's fence locks the unowned row
// at the version read (FOR KEY SHARE, plus a transaction-scoped advisory
// lock that keeps two workers from processing the same candidate), the
// Processor writes its output under the version the claim will set, and one
// statement at the end makes the claim (the same compare-and-set on version
// under FOR UPDATE SKIP LOCKED), records the checkpoint (compare-and-set on
// the position read) and, in lock mode when the batch caught up, releases
// the partition again. So a tiny partition costs one transaction and one
// WAL flush: claim, output, checkpoint, history and release. A failure
// anywhere before the commit, a lost race included, rolls all of it back:
// the row is as the candidate read saw it. Rows being claimed this way
// still read as claimable at the head of the index, so the poll reads past
// the ones the worker knows of (its own, and those it lost at their fence,
// skipped while at the same version for a lease's length at most). A
// claim statement that finds its fenced row locked (a producer's FOR NO
// KEY UPDATE passes the fence's FOR KEY SHARE but not the claim's FOR
// UPDATE) lost no race: nobody else can claim the row while the fence
// holds, so the candidate is tried again at the next poll instead of
// skipped, and the partition does not wait a lease's length for an owner
// because every claimer lost to the one that met the producer. A processor error is then
// recorded as for any batch (claimed alone, failed, backed off); a
// transient error, or a first batch too long for a lease, falls back to a
// claim of its own whose batches run under heartbeats. A partition still
// held after that commit (leader mode, or more work than one batch) is
// renewed from then on like any other claim. Nothing renews a lease before
// its claim commits, so that lease is counted from the claim statement's
// arrival (statement_timestamp(), not the transaction's start, a batch
// earlier), and its local deadline from the moment that statement was
// sent, which precedes it: a long first batch does not leave the lease
// nearly spent at its commit. Until then the row is fenced FOR KEY SHARE,
// so no other claim can commit; the transaction itself ends by StaleAfter
// − SafetyMargin, as a batch ends at its lease's local deadline.
//
// Claim in groups. When the worker has room for several such candidates
// and the Processor implements GroupProcessor, up to ClaimGroup of them
// (default 16) share one transaction: one statement fences them all
// (FenceUnownedGroup: each candidate, in partition_key order, gets the
// lone fence's predicate, advisory try-lock and FOR KEY SHARE SKIP LOCKED;
// those lost there are passed over, and a few spare candidates read by the
// same poll take their places, the statement stopping once it has fenced
// as many as the worker has room for), ProcessGroup writes every
// member's output, one statement claims every member, records every
// checkpoint and history and releases the caught-up ones
// (ClaimAdvanceGroup, each member exactly as ClaimAdvance), and one commit
// makes it all durable: a group of one-item partitions costs the same
// handful of statements and one WAL flush as one of them alone (with the
// pricer: begin, fence, one read, one write, claim, commit). The group is
// all or nothing: if any member's claim is lost after processing, or the
// processor fails, or the group outlasts a lease, everything rolls back
// and each member is claimed with its first batch on its own (above), so
// a processor error is recorded against the partition that causes it; a
// transient error leaves them all claimable. A member not caught up after
// its first batch is held on like any claim. A group's first batches take
// at most the worker's group bound of items in all, shared among the
// members; a group that turns out too long for the statement timeout or
// its deadline is not formed again: groups take half as many items from
// then on and each member is claimed on its own (sizing.go). A group given up mid-statement
// may still hold its rows on the server for a while; a member's own claim
// that then finds its row locked lost it to this worker's dying
// transaction, not to another worker, and tries again at the next poll
// rather than skipping it for a lease's length.
//
// Held groups. The batches of partitions a worker holds are committed
// several to a transaction when the Processor implements GroupProcessor
// (and ClaimGroup is above 1), with no timer and no wait of their own: a
// held partition whose batch is ready runs it at once, alone (Process,
// below), unless a batch transaction of another of the worker's held
// partitions is in flight; then it queues its batch, and when the
// transaction in flight ends, the batches queued meanwhile (up to
// ClaimGroup, sharing the group bound's items as a group of first batches
// does) run as one transaction: each member is fenced by its own claim
// (the lone batch's fence, FOR KEY SHARE where version and owner match,
// members in partition_key order), ProcessGroup writes every member's
// output (Group.Owned), every checkpoint is recorded (the lone batch's
// compare-and-set on version and position, in the same order), the
// members that caught up are released in one statement (lock mode;
// segments in either mode), and one commit makes it all durable. A
// member lost at the fence drops out, and its loop gets the fence's
// error, as after a lone batch; a member found caught up there is told
// so; one that would be split runs alone after the group. Any other
// failure rolls the whole group back and each member runs its batch
// alone, so a processor error, a batch too long or a transient error is
// met, counted and retried by the partition that causes it. The group's
// context ends when any member's lease does (its fence would fail the
// commit anyway): the group rolls back and the others go on alone. A
// commit whose outcome is unknown is resolved member by member, as a
// lone batch's. Only partitions that have committed a batch under their
// claim take part: a takeover's first batch (with its history and its
// link to the previous owner's trace) runs alone. A worker with busy
// partitions thus has one batch transaction in flight at a time, which
// carries the batches of all the partitions that became ready meanwhile:
// the fixed cost of a transaction (its statements' round trips and its
// WAL flush) is paid once per group, while a worker with one busy
// partition runs its batches exactly as before.
//
// Heartbeat. Every Heartbeat interval the worker renews its own row and all
// its leases in one statement (a batched compare-and-set on (kind, key,
// version, owner)), over a connection reserved for it. A lease is rewritten only
// when it has less than StaleAfter − 2 × Heartbeat left (never less than
// SafetyMargin + 2 × Heartbeat): the others are checked by the same
// statement, still held or lost, and keep the time they have left, so a
// held row is written about every third beat with the defaults, while the
// worker's own row is renewed at every beat. A lease rewrite is a
// heap-only update (see The task row). The same statement hands back the
// worker's rows that it does not list and whose leases have ended (a lease
// it stopped renewing because its local deadline passed, or a claim whose
// reply it never received): locked FOR UPDATE SKIP LOCKED, version bumped,
// claimable at once, waiting workers notified, "released" (reason
// "expired") in the history. Other workers do not look at a live worker's
// rows, so this is how its lost leases become claimable again. The heartbeat, the claim
// polls and the fair-share read run at every interval on every worker, so
// they send their values as parameters and, on a direct connection, are
// prepared once per connection (through a transaction pooler they are sent
// unnamed, as everything else). Rows another transaction
// holds locked are skipped, not waited for, and reported as still held
// with the time they have left, so one busy row never fails the whole
// renewal. A lease missing from the result is lost: its context is cancelled with heartbeat.ErrOwnershipLost
// and processing stops. A heartbeat whose outcome is unknown (connection
// lost after sending) is resolved by re-reading the rows, never by
// guessing.
//
// Confirm. A partition taken over from a stale owner is processed only
// after Confirm consecutive successful heartbeats, so an old owner that was
// merely slow has time to notice and stop. A partition that was released
// by its owner (or never owned) is processed at once: the owner released it
// itself after its last batch had committed or rolled back, in a statement
// that bumped the version, so there is no old owner still working to wait
// for, and any stray write under the old version would be fenced anyway.
//
// Process. Each batch is one transaction that first locks the task row FOR
// KEY SHARE where version and owner still match (the fence), reads the
// checkpoint, lets the Processor write its output, records the new
// checkpoint and commits. The transaction runs on a connection taken for the
// batch alone; Batch.CopyFrom, Exec and QueryRaw send COPY, prepared
// statements and binary reads over that connection, so whatever it writes there is inside the same
// fenced transaction and commits with the checkpoint or not at all. If the fence finds nothing, the claim is no
// longer current: the transaction rolls back and the worker drops the
// partition. A commit whose outcome is unknown is resolved by re-reading
// the checkpoint. If that commit lands late, after the retry's fence read
// the old checkpoint, the retry fails on its checkpoint compare-and-set or,
// usually earlier, on the output's unique key (23505); a failed batch
// re-reads the checkpoint and, if it moved under the same claim, retries
// from there without counting a failure.
//
// Batch size. A batch takes at most the worker's current batch bound of
// items, which follows how long batches take (sizing.go): it starts at
// min(BatchSize, 1000), doubles after a quick batch that took all it
// allowed (under half of BatchTarget) and halves after a slow one (over
// twice BatchTarget), within [that start, BatchSize]; a batch too long
// for the statement timeout or the lease is rolled back and retried with
// half the items. Size changes what one transaction holds and for how
// long, never what it locks nor in which order: the fence, the checkpoint
// compare-and-set and the release are the same statements whatever the
// size, so nothing in the safety argument depends on it. A larger batch
// only holds its row FOR KEY SHARE longer, which delays a release, a
// rewind or a hand-back (they wait for its commit) and adds to the
// takeover time's "one batch".
//
// Group size. A group holds every member's row FOR KEY SHARE until it
// commits, so it keeps to BatchTarget as a lone batch does (sizing.go):
// groups (of first batches or of held partitions' batches) take at most
// the worker's group bound of items in all, each member at most the batch
// bound. The group bound starts at ClaimGroupItems, halves after a group
// that took more than twice BatchTarget (to half of what the group took,
// if that was less), down to where the batch bound starts (a group is
// then no larger than a batch at its start), and doubles, up to
// ClaimGroupItems, after a group that took all it allowed in less than
// half of BatchTarget. A held group also counts as one batch of its
// largest member's items for the batch bound, so a slow group lowers its
// members' bound too. A group too long for the statement timeout or its
// lease halves the group bound at once, as a batch too long does. As for
// batches, size changes how long rows are held, never what is locked nor
// in which order.
//
// Split. A partition's items are processed in order by one claim at a
// time, so a partition with a large backlog bounds the run however many
// workers join, unless its Processor is a Splitter (the pricer is):
// then the items after certain points can be processed by anyone who
// holds the state that point carries. A batch that finds more than 2 ×
// SegmentRecords items pending on a partition that is not itself a
// segment asks the processor for split points in (position, available)
// and the state at each and at available, and, instead of processing,
// writes in its own fenced transaction one task row per segment — key
// partition.SegmentKey(partition, start) (the partition's key, "#", the
// start in 19 digits, so segments sort right after their partition),
// segment_of the partition, position its start, available its end,
// checkpoint the state its start carries, the partition's generation,
// unowned and claimable at once — and moves the partition's own
// checkpoint to available with the state there (the checkpoint
// compare-and-set of any batch), records "split" and notifies at commit.
// The segments' ranges cover (position, available] exactly, one after
// the other. From then on a segment is a partition like any other:
// claimed (with its first batch, or in a group), heartbeated, confirmed
// after a takeover, fenced, checkpointed and released exactly as a
// partition is, by any worker, several at once; it never gets more work
// (producers cannot add under a segment's key) and is released once
// caught up, in either mode. The partition goes on from its new
// checkpoint with work added later, whatever its segments' progress. A
// later split of the same partition deletes its finished segments that
// nobody holds (FOR UPDATE SKIP LOCKED: a segment being released is left
// for the next). A partition's progress is therefore its row's and its
// segments' together: the view partition_progress gives the processed
// prefix (done_through: the least of the row's position and its pending
// segments' positions) and all pending items, and reports built on it
// speak of partitions, never of segments.
//
// Local deadline. Each lease carries a deadline on the worker's monotonic
// clock: the send time of its last successful heartbeat plus the time the
// lease had left by that heartbeat (the lease length if it rewrote it, what
// the database reported if it only checked it) minus SafetyMargin. When it passes, processing stops (context
// cause heartbeat.ErrLeaseExpired) even if the database cannot be reached,
// so a cut-off worker normally stops before anybody else can claim its
// partitions. Normally, not always: Go's monotonic clock is
// CLOCK_MONOTONIC, which stops while the machine is suspended, so a worker
// suspended mid-lease wakes with its local deadline still ahead although
// the lease has ended by the database clock and the partition may have a
// new owner. The deadline is an optimisation that stops wasted work early;
// safety never rests on it: the woken worker's next batch fails its fence,
// and a transaction it had open was ended by the server
// (idle_in_transaction_session_timeout), as for any pause.
//
// Release. In lock mode a caught-up partition is released at once, by the
// batch that caught up, in its own transaction: after the checkpoint it
// runs the release statement (FOR UPDATE over its own fence, version bumped,
// waiting workers notified at commit), so output, checkpoint and release
// take one commit, and a partition with a single batch of work costs one
// committing transaction in all, its claim included (Claim with the first
// batch, above). A partition
// found caught up at the fence is released on its own. In
// leader mode it is kept and woken by new work, unless the leader is at
// capacity while claimable work waits, when idle partitions are handed
// back to make room. A worker above its fair
// share hands back its newest claims at batch boundaries, once nothing is
// left unclaimed and another live worker wants more: each heartbeat writes
// how many more partitions its worker wants (its room below its share,
// workers.wanted), and no more than that is handed back. A live worker
// that cannot take more (at a smaller MaxPartitions of its own, or one
// that claims nothing) wants nothing and draws no hand-back that would sit
// unclaimed. Conversely, work left unclaimed while no other live worker
// wants more is claimed beyond the share, up to MaxPartitions, once two
// load reads at least StaleAfter apart have both said so (the others
// have published what they want by then): no partition waits for a worker
// that will not take it. On graceful stop the worker claims
// nothing more, marks itself stopped (so the others' shares grow at once),
// lets batches in flight commit (ShutdownTimeout at most), and releases
// everything. No partition is released before the mark has committed: a
// worker woken by a release must already see one live worker fewer, or it
// would keep the old share until its next rebalance. The mark notifies
// ("left") at its commit, and the others recompute their shares at once on
// it, so when the releases' notifications arrive the share in hand is
// already right and they only wake the claim loop. For the same reason a
// worker never claims with a share it knows to be stale: while the
// recomputation that a notification of new (or retried) work asks for is
// rate-limited (once a heartbeat) the round claims nothing (a round that
// reads the load anyway, because its rebalance is due or an until-done
// worker holding nothing looks for the end, makes that recomputation
// instead of putting it off), and a share
// computed when there was no work at all is recomputed before the first
// claim that finds some. Releases bump the version and notify waiting
// workers, which claim without confirmation.
//
// Waking. The claim loop runs at start, every PollInterval, on every
// notification, once each time the listening connection is (re)established
// (notifications sent while it was down are lost), and when a held
// partition ends. A round that fails is retried after the Backoff schedule
// rather than left to the next poll. Notifications need a session
// connection: a worker whose handle goes through a transaction pooler
// (dbconn.DB.Pooled) listens on Config.ListenDB or the handle's ListenURL
// if given and otherwise only polls, as it does
// with PollOnly; the workers table records which (wake: listen or poll).
// Nothing else depends on session state: every statement and transaction
// stands alone, so the pooler may run each on another server session.
//
// Failure. A batch that fails with a transient error (connection, timeout,
// lock conflict) is retried while the lease holds. Any other error releases
// the partition with an exponential back-off, and after MaxAttempts marks
// it quarantined (failed_at, last_error) until retried; other partitions
// carry on.
//
// Rewind. A partition can be processed again from an earlier (or later)
// position under a new generation of its output
// (partition.Store.Rewind): in the caller's transaction, its row is locked
// FOR UPDATE (rows in key order), and generation, version, position and
// checkpoint state are set together, with no owner, no failure or back-off,
// claimable at once; a "rewound" event is recorded and the workers of the
// kind are notified at commit. The partition's segments (Split) are
// looked for only once the partition's row is locked, by a statement that
// starts then, locked in key order after their partition, and deleted:
// a split that committed while the rewind waited for the row (the
// splitting batch holds it under its fence) is seen, and nothing of the
// old generation is left claimable. Their holders fail their next fence,
// heartbeat or compare-and-set, as after a takeover, and the new
// generation is split afresh if it has the backlog for it. The fence reads the generation with the
// checkpoint (Checkpoint.Generation), so a processor writes each batch's
// output under the generation it belongs to (pricing keeps each
// generation's priced rows apart and switches readers to the new one when
// it has caught up). The version bump makes the rewind a change of
// ownership like a release: the claim that was processing the previous
// generation fails its next fence, heartbeat or compare-and-set and stops,
// as after a takeover. A rewind waits for the batch holding the row, and
// may wait out a few more where an owner's batches follow each other
// closely (a transaction waiting for FOR UPDATE does not stop the next
// FOR KEY SHARE fence); what it rewinds is the checkpoint it finally
// locks, which it returns.
//
// History. Each change of ownership also records an event (table events)
// in its own statement: the claim statement records "claimed" or
// "takeover" (with the old owner and its last heartbeat), the release,
// failure and retry statements record "released" (with the reason),
// "failed" or "quarantined", and "retried"; a claim's first batch records
// "first_batch" inside its fenced transaction, with the time from the old
// owner's last heartbeat to this commit for a takeover. So the history
// commits or rolls back with the change it describes. Fence rejections and
// lost leases, which change nothing, are recorded by a separate
// best-effort insert. Each event records its partition's kind
// (events.task_kind; events.kind is the event's own). Inserting an event
// locks no task row and takes no
// lock any protocol statement waits for (events are only appended, and
// pruned by age and count about once a minute), so the locking below is
// unchanged. Heartbeats and batches after the first write no events.
//
// Tracing. With a global OpenTelemetry tracer provider installed, claims,
// confirmations, batches (fence to commit) and releases are spans. A
// batch's checkpoint update also stores the batch's trace context
// (traceparent) in the same compare-and-set, and the fence reads it back,
// so a claim's first batch links to the batch that committed the
// checkpoint it resumes from: after a takeover, the previous owner's last.
//
// # Where each step lives
//
//   - processor.go: Processor, Batch and Result, what a workload implements;
//     GroupProcessor and Group for claims in groups and held groups.
//   - distributor.go: New, Start, Stop and the graceful-stop sequence
//     (claim nothing more, leave the live count, release).
//   - claimer.go: the claim loop (Claim, Waking) and the choice of
//     candidates, including a dead worker's partitions beyond the share.
//   - txn.go: the fenced transaction, one pipeline for every batch the
//     worker commits (Process, Claim with the first batch, Claim in
//     groups, Held groups): begin, fence, process (Process for a lone
//     batch, ProcessGroup for a group), check each member's range, record
//     (advance, or claim and advance), release the members caught up,
//     commit, report a commit the standby did not confirm, and resolve an
//     unknown outcome. A lone batch is a group of one; a claim is the same
//     transaction with its claim in the record step. What differs is data
//     on the transaction and its fence and record statements.
//   - claimgroup.go: unowned partitions claimed with their first batches,
//     alone or in groups (the claim's fence and record statements), and
//     what follows: held on or released, lost candidates skipped, after a
//     rollback each member on its own.
//   - claimbatch.go: candidates lost at their fence, transactions given up
//     mid-statement, and the claim of its own after a first batch failed.
//   - share.go: the fair share and hand-back. The decisions themselves
//     (the share, what to hand back, which candidates to claim, the
//     renewal threshold, confirmation, back-off) are pure functions in
//     internal/decide, which the simulator (internal/sim) calls too.
//   - listener.go: LISTEN on a direct or pooled connection.
//   - renewer.go: Heartbeat over a connection reserved for it.
//   - partition_loop.go: one held partition: Confirm, then batches until
//     caught up, handed back, lost or stopped.
//   - batch.go: Process, a held partition's batches (the fence and record
//     statements of held partitions: Fence, Advance, the first batch's
//     history, the release with the last batch), and a lone batch; late
//     commits of a claim's own batch (movedOr).
//   - heldgroup.go: Held groups, held partitions' batches queued behind
//     the one in flight and run as one transaction, and the fall-back to
//     each alone.
//   - release.go: Release, Failure (back-off, quarantine) and loss.
//   - split.go: Split, a partition's backlog into segments, and which
//     partitions are released once caught up.
//   - config.go, event.go, history.go, trace.go: settings, events,
//     ownership history and tracing.
//   - The statements themselves are in internal/taskstore (store.go,
//     statements.go, claimbatch.go, claimgroup.go); the producers' and
//     operators' (AddWork, Status, Progress, Retry, History) in package
//     partition; lease renewal and the local deadline in package heartbeat.
//
// # States
//
//	                     claim (CAS on version)
//	 pending ─────────────────────────────────────────────▶ active ◀─┐
//	(unowned)                                                  │  │   │ batch
//	   ▲  ▲                    claim of a stale row            │  │   │ commits
//	   │  │   stale ──────────▶ claimed ── Confirm beats ──────┘  └───┘ (fenced)
//	   │  │     ▲                 (takeover)                      │
//	   │  │     └── no renewal for stale_after (crash, pause, ────┤
//	   │  │         partition from the database)                  │
//	   │  └──── release: caught up (lock mode), rebalance, stop ──┤
//	   │                                                          │
//	   └── back-off ends ◀── backoff ◀── batch error ─────────────┤
//	                           │ MaxAttempts                      │
//	      retry ◀── quarantined ◀┘            caught up (leader) ─┴─▶ caught_up
//
// # Takeover time
//
// After an owner dies, its registration ends StaleAfter after its last
// heartbeat, and its leases at most StaleAfter after their last renewal
// (sooner if its last heartbeats only checked them; a claim it made after
// its last heartbeat, StaleAfter after that claim). Once both have ended
// another worker finds the row within one PollInterval, claims it,
// and starts its first batch after Confirm heartbeats. So the first batch
// by another worker commits within
//
//	StaleAfter + PollInterval + Confirm × Heartbeat + one batch
//
// of the crash: 1s + 0.2s + 0.6s + a batch with --heartbeat 200ms
// --stale-after 1s --confirm 3; 10s + 1s + 3s + a batch with the defaults.
// The bound assumes a surviving worker below MaxPartitions; its fair share
// does not matter: a dead worker's partitions (still owned, lease expired)
// are claimed beyond the share, up to MaxPartitions, and the share corrects
// itself afterwards (the dead worker leaves the live count at its next
// rebalance and surplus is handed back at batch boundaries). A claim round
// reads those stale rows first, through the workers that are not live,
// and claims them before any partition nobody has
// started, however many of those wait: a survivor busy with fresh work
// takes a dead worker's partitions at its next claim round, not after the
// fresh ones. Only when every survivor holds MaxPartitions does the
// partition wait for room: then it is taken at the first slot a survivor
// frees (its partition caught up, handed back or lost), and the bound
// grows by that wait and by the batch that survivor had in flight.
// A graceful stop hands partitions over immediately (one notification, one
// share recomputation and one claim, no confirmation), even to workers
// that were at their share.
//
// # The claim floor
//
// A row lands below a worker's floor when its claimable_at (the time of
// the statement that made it claimable, on the database's clock) is below
// the floor by the time its transaction commits: the commit came more than
// FloorMargin after that statement (a producer's long transaction, a
// synchronous standby or an fsync stalling the commit), or the database's
// clock stepped back (a new primary whose clock is behind the old one's),
// or hand-written SQL backdated it. What bounds its wait:
//
//   - Every notification that makes rows claimable carries a time no later
//     than theirs (producers, releases, hand-backs, Retry, splits,
//     rewinds); a worker that hears one lowers its floor to FloorMargin
//     below it, so its next read, which the notification wakes, finds
//     them.
//   - A read that started before the floor was last lowered (its snapshot
//     may predate the commit announced) may lower the floor but never
//     raise it.
//   - The first read at least FullReadInterval after the last full read
//     started (by Config.Clock, so a step of the database's clock changes
//     nothing), of the candidates or of the fair-share load, reads from the
//     start and sets the floor to FloorMargin below the earliest claimable
//     row it found, lower or higher than it was; a read that started
//     before it ended cannot raise it again.
//
// So a row committed at time c is seen by the first full read that
// starts after c: it starts by the first read at or after c +
// FullReadInterval, since the full read before it started at or before c.
// From then until the row is claimed every read's window holds it: a read
// started after that full read finds it or an earlier row, so the floor
// stays below it, and one started before cannot raise the floor. A worker
// that wants more partitions reads the candidates at every claim round,
// at least every PollInterval, so the row is claimed (behind rows that
// became claimable before it) within
//
//	FullReadInterval + PollInterval + one claim round
//
// of its commit, whatever the commit's delay or the clock's step: 30s + 1s
// with the defaults. When every worker is at its share, the load read,
// every min(RebalanceInterval, StaleAfter/2) for a worker below
// MaxPartitions, counts it within FullReadInterval + that interval, and the
// share grows to take it. A row a notification announced to a listening
// worker waits for none of this: it is in the next read's window.
//
// # PostgreSQL versions
//
// The protocol runs, and is tested, on PostgreSQL 15, 16, 17 and 18 (see
// the README's versions table; make test-pg PG=<major> runs the
// version-sensitive slice of the suite on one). What it rests on is the
// same on each: read committed's re-check of a row updated meanwhile (an
// UPDATE or SELECT ... FOR UPDATE that finds the row changed re-evaluates
// its WHERE on the newest version, and skips it if it no longer matches),
// the row-lock conflicts (FOR KEY SHARE against FOR UPDATE, not against
// FOR NO KEY UPDATE), SKIP LOCKED, transaction-scoped advisory locks,
// LISTEN/NOTIFY delivered at commit, and COPY. The planner's choices are
// checked on each (the claim reads tasks_claimable from its floor, the
// heartbeat finds its leases by key).
//
// One statement differs. A worker's heartbeat upserts its row and
// notifies the others when the upsert inserted it (its first heartbeat).
// Before 18 the statement tells an insert by the system column xmax (0 on
// a row just inserted); from 18 on by RETURNING OLD (no old row after an
// insert), which the store chooses by the server's server_version_num,
// read before its first heartbeat (and again after a statement the server
// could not parse). The same upsert keeps the held and backlog counts a
// claim raised after its snapshot by comparing the row's xmin with the
// snapshot's, on every version. Neither locks anything: the first is a
// notification, the second a count the fair share reads, and neither
// decides an ownership (see item 8).
//
// # Safety argument
//
// Claim: at most one claim can commit output for a partition at any time,
// and within a generation committed checkpoints never go backwards or
// skip.
//
//  1. Every change of ownership (claim, release, failure, retry, rewind,
//     and a heartbeat's hand-back of its own rows past their leases) locks the
//     row FOR UPDATE and bumps version. Claims are compare-and-set on the
//     version read, so each version is held by exactly one claim. A release
//     made by the batch that caught up takes FOR UPDATE inside the batch's
//     transaction, over its own fence, after the checkpoint: output,
//     checkpoint and version bump commit together or not at all, and the
//     owner's renewals wait for that commit (or rollback) like any other.
//     A claim made with its first batch (an unowned row only: owner IS
//     NULL, so never a takeover) is the same compare-and-set under FOR
//     UPDATE SKIP LOCKED on the version its fence read, at the end of
//     that batch's transaction, in one statement with the checkpoint
//     compare-and-set and, when caught up, the release (the version bumped
//     twice). The fence (FenceUnowned) holds the row FOR KEY SHARE from the
//     batch's start where it is unowned at that version, so no change of
//     ownership commits in between (Claim skips the row; releases,
//     failures and retries wait), and a holder of the same fence makes the
//     claim lose, not wait. The output is written under the version the
//     claim sets and commits with it or not at all; the lease is renewed
//     by heartbeats only once committed, and was never visible before.
//     A group of such claims (Claim in groups) locks each member's row
//     exactly so, in one transaction: the fence statement takes the rows
//     in partition_key order and never waits (advisory try-locks, SKIP
//     LOCKED), nor does the claim statement (FOR UPDATE SKIP LOCKED on rows
//     this transaction already holds FOR KEY SHARE), so two workers
//     grouping overlapping candidates cannot deadlock or block each
//     other: a row one holds is dropped by the other's fence, or makes the
//     other's claim lose. The claim statement's compare-and-sets must all
//     hold or the transaction rolls back with every member's output, so
//     each member's claim, output, checkpoint and release commit together
//     as for a lone claim; that they also commit with other partitions'
//     changes, which lock other rows, changes nothing in 1–3.
//     A held group (Held groups) is lone batches in one transaction: each
//     member's row is fenced FOR KEY SHARE by its own (version, owner),
//     its checkpoint written by the compare-and-set on its own version
//     and position, and its release by the lone release statement, so
//     each member's output, checkpoint and release commit together or
//     not at all, only while its own claim is current. A member whose
//     fence finds nothing was never written in the group. The group's
//     locks are taken phase by phase, each phase in partition_key order
//     (fences FOR KEY SHARE, then checkpoint updates, then the releases'
//     FOR UPDATE on rows it already holds), so it waits for the lockers
//     a lone batch waits for (a rewind's or a change of ownership's FOR
//     UPDATE at its fence, a producer's FOR NO KEY UPDATE at its
//     checkpoint update) in the global order, and no cycle forms.
//  2. A batch's output is written in a transaction that holds the row FOR
//     KEY SHARE, taken where version and owner match, until it commits.
//     FOR KEY SHARE conflicts with FOR UPDATE, so no change of ownership
//     can commit between the fence and the batch's commit: either it
//     committed before the fence (which then finds nothing and the batch
//     rolls back), or it waits (or skips) until the batch has committed.
//     Heartbeats lock FOR NO KEY UPDATE, which does not conflict with the
//     fence, so long batches do not delay renewals. (A claim kept past
//     its first batch raises its worker's held count in its claim
//     statement, so that worker's own heartbeat may wait on its worker row
//     from that statement to the commit, one round trip; a later
//     heartbeat can only make leases end sooner, never change ownership.)
//     Producers (partition.Store.AddWork) also lock FOR NO KEY UPDATE, in
//     partition_key order, and only raise available: they never wait for a
//     batch nor change ownership (a claim made with its first batch waits
//     for them at its claim statement, and they for it from there to its
//     commit, as for a batch's checkpoint update). Output written
//     through Batch.CopyFrom (COPY) goes over the same connection inside the
//     same transaction, so it is covered alike. Heartbeats SKIP LOCKED: a
//     row another transaction holds (a load adding work locks FOR NO KEY
//     UPDATE until it commits; a batch's checkpoint update until its
//     commit) is retried on its own with a bounded lock wait (at most a
//     quarter of the lease, within the heartbeat's own timeout), which a
//     committing batch does not outlast; if still locked it
//     is not renewed by that heartbeat, and the lease keeps the
//     time it had left, by the database clock, which its local deadline
//     follows. Skipping changes nothing in 1–3: a renewal never changes
//     ownership, and a lease that is not renewed can only end sooner.
//     The same holds for leases a heartbeat checks without rewriting
//     because they have time left: they are not locked at all, and the
//     worker's deadline for them comes from their real end.
//     A heartbeat's hand-back takes only rows of its own worker that the
//     heartbeat does not list (so no partition loop of that worker holds
//     them: it stopped at its local deadline, which comes before the
//     lease's end, or never started) and whose leases have ended, FOR
//     UPDATE SKIP LOCKED: a row fenced by a batch or being changed by
//     anyone else is skipped, never waited for, and a row another worker
//     took over meanwhile no longer matches the owner. It is a release
//     like any other: any write still in flight under the old version
//     fails its fence or its compare-and-set. Finding stale rows through
//     the workers table changes no lock: it only reads, and the claim's
//     compare-and-set still requires the row's own lease to have ended,
//     so a live worker's row is never taken from it, whatever its
//     registration says.
//     It bounds what a stalled locker can cost: only the leases on rows
//     it holds, and only if it holds them longer than they have left;
//     loads run with idle_in_transaction_session_timeout, so the server
//     ends a stalled one and releases its locks.
//     A claim or release made outside a transaction also updates its own
//     worker's row (the held count the fair share reads), as its
//     heartbeats do. Only that worker's statements lock its row, and none
//     waits for anything once it holds it: heartbeats and claims take task
//     rows SKIP LOCKED, a release takes the worker's row after its task
//     rows. So they may wait for each other on that row for one
//     statement, never in a cycle; and the count decides no ownership,
//     only how many partitions a worker asks for.
//     A rewind is such a change (FOR UPDATE, version bumped) that also
//     sets the generation, position and state: a batch of the previous
//     generation in flight holds the row FOR KEY SHARE, so the rewind
//     waits for it to commit (its output then belongs to the previous
//     generation, whose checkpoint it advanced) or to roll back; every
//     later write of that claim fails its fence or compare-and-set. The
//     next claim fences the new generation at the rewind's position, so a
//     generation's checkpoints start where its rewind put them and then
//     obey 1–3 like any other; positions move backwards only by a rewind,
//     which starts a generation.
//  3. The checkpoint is read under the fence and written in the same
//     transaction as the output, with a compare-and-set on both the
//     version and the position the fence read. So the next holder reads
//     exactly the last committed position (no gap), and a batch retried
//     after a commit whose outcome was unknown — which may still apply
//     after the retry's fence read the old position — fails its checkpoint
//     update instead of committing the same items twice or moving the
//     checkpoint backwards. Output tables can add a unique key on
//     (partition, position) as a last line of defence; pricing does.
//  4. Nothing in 1–3 depends on clocks or timing, nor on session state:
//     through a transaction pooler each statement and transaction may run
//     on another server session, and the fence and compare-and-sets are
//     each within one transaction. Local deadlines, confirmation and
//     server-side timeouts (statement_timeout, lock_timeout,
//     idle_in_transaction_session_timeout below the lease, TCP
//     keepalives; through a pooler the timeouts are set in each batch's
//     transaction) make a slow, paused or cut-off owner stop, and
//     release its locks, before others take over, but even a worker frozen
//     mid-transaction (SIGSTOP, VM pause) and resumed later cannot commit:
//     its session is ended by the server, or its fence fails.
//  5. Segments. A split writes its segment rows and moves the
//     partition's checkpoint from the position its fence read to
//     available in one transaction, under that fence, with the checkpoint
//     compare-and-set of 3: both commit or neither, only while the claim
//     is current, and once (a second split of the same range fails its
//     compare-and-set, or the segments' primary key). The segments'
//     ranges partition (position, available] exactly and the partition
//     goes on after available, so every item lies in exactly one row's
//     range, and 1–4 hold for each row, segments included: each item is
//     processed by exactly one committed batch per generation. A segment
//     row never gets more work (its available is fixed; AddWork refuses
//     its key), so its checkpoint ends at its end. What state a segment
//     starts from is the Splitter's contract: the state its start
//     carries. Locks: the split inserts rows nobody else can see before
//     it commits, in key order, and deletes finished segments FOR UPDATE
//     SKIP LOCKED, never waiting, before it inserts (so a finished
//     segment at one of its starts is replaced, not a primary-key
//     failure); its other locks are its batch's (the partition's row FOR
//     KEY SHARE, then its checkpoint update).
//     A rewind must delete every segment of its partitions, those of a
//     split that commits while the rewind waits included. A split commits
//     only in a batch holding the partition's row FOR KEY SHARE, so once
//     the rewind holds the row FOR UPDATE no split of it can commit, and
//     a statement whose snapshot is taken after that lock was granted
//     sees all its segments (a statement that found the rows before
//     waiting would not: READ COMMITTED re-checks only the rows it found,
//     and the segments written meanwhile would survive the new
//     generation, claimable, their items processed twice). So the rewind
//     locks FOR UPDATE, one statement per partition, in key order: the
//     partition, after the segments of the partitions it already holds
//     that sort before it; a last statement locks the remaining segments
//     (those sorting after the last partition), then deletes the
//     segments and rewinds the partitions. Each segment is thus looked
//     for only by a statement that starts with its partition held, and
//     the rows are taken in global key order (a segment's key sorts
//     after its partition's, and a key of another of the rewind's
//     partitions sorting in between is locked in its place), so a rewind
//     waits, like a change of ownership, for the fences and checkpoint
//     updates of batches (segments' included) in flight, and none of
//     those lockers, which also take rows in key order, waits for it in
//     a cycle. Its deletion of the segments is a change of ownership
//     every later write of their claims fails on (the row is gone). A
//     caller that locks the partitions itself before the rewind
//     (pricing's re-rating locks its contracts' rows in one statement)
//     finds its segments safely, but with several partitions it holds
//     the later ones before the earlier ones' segments: a held group
//     fencing a segment of one and a later partition can then deadlock
//     with it, which PostgreSQL detects and breaks (for the group a
//     transient error, retried).
//  6. A partition is (kind, partition_key), the task table's primary key,
//     and 1–4 hold per partition so named. Every statement of 1–3 names its
//     rows by both: a worker's candidate read, claim compare-and-set,
//     fence, checkpoint compare-and-set, renewal, release and failure, and
//     a producer's AddWork, match rows of their own kind only, so a row of
//     another kind with the same key (and perhaps the same version and
//     position) is never read, locked, claimed, advanced or added to by
//     them. A worker of one kind thus never processes another kind's
//     items, nor moves its checkpoint; its processor's output is keyed by
//     the partitions it is handed (Batch.Kind names their kind). Locks:
//     each of these statements locks rows of a single kind, in
//     partition_key order, which is (kind, partition_key) order, and the
//     fairness inputs (workers' rows) are each worker's own; a producer
//     adding work to several kinds in one transaction adds it in kind
//     order. So all multi-row lockers still follow one global order and
//     the argument in 2 about waits and deadlocks is unchanged. Kinds
//     share only the claim fence's advisory try-lock space (its key
//     hashes kind and key; a collision makes one candidate be passed over
//     for a round, as in 1, and safety does not rest on it) and the
//     notification channel (each notification names its kind; others
//     ignore it).
//  7. Failover. 1–6 take a committed transaction to stay committed. A
//     failover to a standby that had not received every commit (an
//     asynchronous standby, or a synchronous one whose wait the server
//     cancelled: PostgreSQL then warns that the commit "might not have
//     been replicated", which dbconn counts and the distributor reports
//     as EventNotReplicated) keeps a prefix of the old primary's commits,
//     since a standby replays the WAL in order. Every step of 1–5 is one
//     transaction (a batch's output with its checkpoint, claim and
//     release; a claim; a release; a split with its checkpoint), so the
//     new primary is a state the protocol has already passed through:
//     the lost suffix takes each batch's output with its checkpoint, and
//     the next owner resumes at the surviving checkpoint, processing the
//     lost items again, once. A worker whose claim was lost with the
//     suffix may meet a new claim of the same version number on the new
//     primary, but every fence, compare-and-set and renewal also matches
//     the owner (an instance id unique to one process run), so its
//     writes fail and it stops. Nothing here depends on being told of
//     the warning: the report is for operators, and for loads, whose
//     records exist nowhere else (worker load exits 6).
//  8. Server versions. 1–7 use the same locks and statements on
//     PostgreSQL 15–18 but one: the heartbeat's upsert of the worker's own
//     row tells its first heartbeat by xmax before 18 and by RETURNING OLD
//     from 18 on. Either way the statement locks the same rows in the same
//     order, and what it decides is whether to notify "joined" (a hint to
//     recompute shares sooner: a missed or extra one changes when a share
//     is recomputed, never who owns a row).
//
// Side effects outside the database are at least once: a batch may perform
// them and then fail to commit (crash, fenced), and the next owner will
// process the same items again. Make them idempotent with
// Batch.IdempotencyKey, which names the same items identically whoever
// processes them (and, for a kind other than the default, includes the
// kind).
//
// The same argument covers the other rows on this protocol, which share no
// lock with task rows: scheduled jobs (package schedule; table jobs) and
// leaderships (package leader). Their claims (and a leader's resignation)
// lock the row FOR UPDATE and bump version; heartbeats renew FOR NO KEY
// UPDATE through the same heartbeat service; a run's or a leader's writes
// are fenced FOR KEY SHARE on (name, version, owner) — for a run also its
// slot — and a run's completion is a compare-and-set on the same. So at most
// one run per slot commits, whatever the workers' clocks say.
package distributor

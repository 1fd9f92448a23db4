// Package ingest loads pricing inputs: tiers files and records files.
//
// A Store is bound once to a database handle and the schema of the
// pricing tables; Load loads, Loads lists the loads committed:
//
//	rep, err := ingest.NewStore(db, "").Load(ctx, ingest.Options{TiersPath: "tiers.csv", RecordsPath: "records.csv"})
//
// # Input files
//
// A tiers file has the header contract_id,threshold_minor,discount_bp and
// gives the complete tier set of every contract it names (rows in any
// order): contract_id is 1–64 characters from A-Z a-z 0-9 . _ : -;
// threshold_minor is an integer ≥ 0, distinct within the contract;
// discount_bp an integer from 0 to 10000; at most 64 tiers per contract. A
// set replaces the contract's stored one. Once a contract has priced
// records (its task row has position > 0) or is being re-priced, its
// tiers cannot change unless Options.Reprice is set: the set then becomes
// its tiers and the contract is re-priced under them as a new generation
// (package rerate), in the load's transaction, under its task row lock
// (FOR UPDATE, step 7). An identical set is accepted and changes nothing.
//
// A records file has the header contract_id,record_id,amount_minor.
// record_id is 1–128 printable characters (valid UTF-8, unicode.IsPrint),
// unique within its contract; amount_minor is an integer from 1 to
// 1,000,000,000,000; the contract must exist or be created by the tiers
// file of the same load. A contract's records are accepted in file order,
// after those of earlier loads: record seq is the dense 1-based acceptance
// position within the contract. A record id seen before (stored, pruned
// by worker prune, or earlier in the file) with the same amount is a
// re-delivery, skipped and counted; with another amount it is an error
// (for a pruned record, one that says it was pruned and cannot be
// amended), unless Options.Amend is set and the
// earlier one is stored: the row then amends the stored record (its amount
// replaced in its chunk, the old one kept in the amendments table) and
// its contract is re-priced from that record on (package rerate). An
// amendment takes the staged path (the direct copy gives way on it). A load may not take a contract's
// cumulative gross past 2^63−1.
//
// Integers are plain decimal (digits, optionally a leading minus sign,
// which is then out of range). Files are UTF-8 CSV (RFC 4180 quoting, LF or
// CRLF line ends, blank lines ignored). Every problem is reported as
// FILE:LINE: reason, LINE being the physical line on which the row starts.
//
// The readers (NewTiersReader, NewRecordsReader) check each row on its
// own and stream: memory does not depend on the file's size, and a CSV
// record may not span more than 1 MiB (an unclosed quote otherwise reads
// the rest of the file as one field). The checks across rows and against
// the database are done by Load. Load reads the records file a few
// batches of rows ahead of the rest of the loader, in two goroutines, one
// parsing the CSV and one applying the single-row checks (and hashing
// each record id into its key, see 5, and numbering the contracts, so
// that the writer looks up no contract id), so that both run beside the
// writing of the rows.
//
// # The load transaction
//
// Load runs one transaction on one connection:
//
//  1. pg_advisory_xact_lock on a fixed key serialises loads, and inserts
//     through the records view take the same lock (its trigger), so a load
//     and such an insert never check for duplicates against each other's
//     uncommitted rows. Only loads raise tasks.available (an insert through
//     the view stores its records right after the contract's last stored
//     seq, and its producer raises available in the same transaction), so
//     while the lock is held a contract's available is the highest seq
//     stored and can be read without a row lock. Workers do not take this
//     lock and are not held up by it.
//
//  2. A loads row is inserted; its load_id tags the records added. The
//     id is the last committed load's plus one (the lock makes it this
//     load's alone), so a load that fails or is rolled back takes no id
//     and leaves no gap; the column's sequence is advanced all the same,
//     to stay ahead of every id.
//
//  3. The tiers file is parsed and copied (COPY, binary) into a temporary
//     staging table, one row per input row with its line number; a row
//     that breaks a rule on its own is staged with its reason. The
//     cross-row checks are then UPDATEs over the staging table: duplicate
//     thresholds, tier counts, comparison with stored tier sets. On the
//     staged path (5) the records file is staged and checked the same
//     way: unknown contracts, cumulative gross, record ids repeating
//     stored or earlier ones.
//
//  4. Tiers are applied first: new contracts and their task rows, of
//     kind pricer.Kind ("pricing"; INSERT ... ON CONFLICT DO NOTHING,
//     which locks no existing row), changed
//     tier sets replaced. A tier set with any invalid row is rejected as a
//     whole, and so are then the records of its contract unless that
//     contract existed before.
//
//  5. The records are stored with seq = available + their rank in file
//     order, in chunks (see Storage below), by the direct copy, which
//     streams the file into record_chunks, or, when it gives way, by the
//     staged path. If any row is invalid and SkipInvalid is off, the
//     transaction rolls back and Load returns an *InvalidInputError.
//
//     The direct copy (Report.DirectCopy) runs under a savepoint, as a
//     few binary COPY statements into record_chunks while the file is
//     read, so the session is never idle in between, and holds at most
//     Options.MemoryLimit (128 MiB by default) whatever the file's size.
//     Each contract's valid records collect in an open chunk, written
//     into the COPY once it holds ChunkSize records. When the open chunks
//     take half the budget, every open chunk but the one of the contract
//     being read (likely to fill: a file grouped by contract writes its
//     chunks straight away) is moved, as compact binary (contract number,
//     record ids and amounts), to the spill files: temporary files
//     removed from their folder as soon as they are made, up to 256 of
//     them, chosen by the contract's hash, their write buffers taking a
//     sixteenth of the budget. From then on the records of a contract
//     that has spilled go straight to its spill file, in file order, with
//     no open chunk. After the file, each spill file is read back alone
//     into open chunks (it holds about 1/256 of the contracts), which are
//     written as whole chunks, and the file is closed, freeing its disk.
//     So chunks are whole however the file interleaves its contracts, at
//     the cost of writing and reading once about 26 bytes a record
//     spilled (2.6 GB for 100M records of 100,000 interleaved contracts).
//     Written early instead, as they were before, 100,000 interleaved
//     contracts made chunks of about 16 records (20M records made 1.2M
//     chunks, whose rows took the server 29 s of a 33 s load). Only when
//     no temporary file can be made, or a spill file read back outgrows
//     the open chunks' share, are open chunks written as they are
//     (partial). A chunk's seqs need its
//     contract's available: the contracts a file names are read (one
//     query, all must exist) between two COPY statements, once records of
//     contracts not read yet take 3/64 of the budget or before a flush
//     needs them, and at the end. Only loads raise available, and loads
//     are serialised (step 1), so this read stays true until commit, and
//     is checked again under the row locks (step 7).
//
//     Repeated record ids are found exactly, with bounded memory. Each
//     valid row's (contract, record id) is hashed to a 64-bit key, which
//     goes with the row's contract and rank in it (16 bytes) into a key
//     set. Up to one key per 72 bytes of the budget, less the bitmap
//     (1.7M at the default), they stay in memory; past that they are written to a temporary file (removed
//     from its folder as soon as it is made, so a crash leaves nothing),
//     in buckets chosen by the key's high bits: as many buckets as make
//     each fit in half the budget, from the share of the file read so
//     far, their write buffers taking a quarter of the budget. After the
//     file, the stored record ids of the contracts that had records
//     (available > 0), and those pruned from them (pruned_chunks, see
//     package pricer's retention), are read in binary and hashed; a key
//     is added too only if a file row's key has its high bits (a bitmap
//     of the file rows' keys, a 32nd of the budget: 2^25 bits at the
//     default, so that of the stored and pruned ids of a file's
//     contracts about f/2^25 for f rows in the file are added, and
//     the others, which no row can repeat, go no further). Each
//     bucket is then read back alone and grouped by key with a counting
//     sort on the key's next bits, so that equal keys meet; a bucket that
//     outgrew half the budget (more stored records than foreseen) is
//     first split again by the following bits. The cost is linear in the
//     records, stored, pruned and new: for each key added 16 bytes written
//     and read once (1.6 GB of disk for 100M records, removed at the end)
//     and a few passes over memory; for a stored or pruned record the
//     bitmap stops, its reading and hashing. The rows of a contract whose key another row or a stored
//     record of it has, normally none, are settled exactly in SQL: their
//     record ids are taken from the chunks just written (by seq), and only
//     the chunks of their contracts that hold the id are read. A record id
//     occurring twice in a contract is a re-delivery when its amount is
//     the first occurrence's (a pruned record's pruned chunk is unnested
//     once and joined to the candidates by hash), and the direct copy rewrites this load's
//     chunks of those contracts without the re-delivered records
//     (renumbered and cut into chunks again). With another amount it is
//     an error, and the direct copy gives way so that the staged path
//     reports it with both lines. Two different record ids of a contract
//     share a key with a chance of about n²/2⁶⁵ for n records of it: such
//     a pair costs one look in SQL and is no repeat.
//
//     With SkipInvalid, rows invalid on their own are kept beside the
//     stream (within 1/8 of the budget, with the re-deliveries to remove)
//     and staged after it, for the reject file. The direct copy gives way to the
//     staged path, rolling back to its savepoint and reading the file
//     again from its start, on an invalid row without SkipInvalid (the
//     load fails, and the staged path lists every problem), on rejected
//     tier rows without SkipInvalid, on an unknown contract, on a repeated
//     id with another amount, on a contract that comes near the gross
//     limit (more than limit/MaxAmountMinor records, stored and new), when
//     rejected rows and re-deliveries outgrow their share of the budget,
//     when the keys need a temporary file and none can be made, when more
//     records of a contract share one key than half the budget holds (no
//     bits are left to split them by: only a file repeating one record
//     that often), and when a seq it writes is already taken (a record inserted through the
//     records view without raising available). A records file that is not
//     a regular file (a pipe) cannot be read twice and takes the staged
//     path at once.
//
//     The staged path copies the whole records file into a staging table
//     and runs the checks of step 3 over it: record ids that repeat a
//     stored or pruned one or an earlier row of the file are looked for by
//     joining the staged rows to the stored records (the records view) and
//     the pruned ones (the pruned_records view) of the contracts they name,
//     and grouping by record id; the accepted records are then stored with
//     one INSERT ... SELECT. Its memory does not depend on the file
//     either, but it is slow for large files (10M records took 181 s, 55%
//     of it in that INSERT and 22% in the grouping).
//
//  6. With SkipInvalid the reject file is written (to a temporary name,
//     renamed after commit), and the loads row gets its counts.
//
//  7. As the last statements, the task rows of the contracts that gain
//     records or change tiers are locked in partition_key order and
//     checked; then the work is added through the producer API
//     (partition.Store.AddWorksTx of kind pricer.Kind: available raised
//     in the same key order, pg_notify delivered on commit). Then commit.
//     Every statement of the loader that reads, locks or creates task
//     rows names the pricing kind: another processor's partitions that
//     share the schema, even one named like a contract, are never touched
//     by a load, nor counted as its records.
//
// # Storage
//
// Records are stored in record_chunks: one row per chunk of up to
// ChunkSize (1,024) consecutive records of one contract from one load, with
// their record ids and amounts as arrays in seq order. A load writes each
// contract's new records in chunks of consecutive seqs from its first new
// seq on, each full (ChunkSize) but the contract's last, except where the
// direct copy could not make its spill files and its memory budget
// wrote a chunk early; a chunk never spans
// contracts or loads. records is a view with one row per record
// (contract_id, seq, record_id, amount_minor, load_id) over the chunks, for
// every reader that speaks SQL; the pricer reads the chunks themselves. An
// insert into the view becomes a chunk of one record (a trigger that keeps
// the former table's unique seq and record id per contract), for SQL that
// inserted records directly; the loader writes whole chunks.
//
// The reason is the cost of a row: stored one row per record, with a
// primary key on (contract_id, seq) and a unique index on (contract_id,
// record_id), 1M records took the server about 2.9 s to take by COPY,
// against 0.75 s for the same rows without indexes and 0.3 s for psql's
// \copy of the file into a plain table. A chunk costs one heap tuple and one
// index entry for a thousand records. The arrays are stored out of line
// uncompressed (STORAGE EXTERNAL): compressing them (pglz) made the COPY
// ten times slower. What the unique index did, finding repeated record ids,
// the loader now does itself (step 5); the priced table's primary key still
// makes pricing a record twice impossible, and the chunk table's checks keep
// each chunk's arrays as long as its seq range, without NULLs, with amounts
// in range.
//
// # Why it is safe while workers run
//
// Workers update task rows all the time (heartbeats every second, claims,
// checkpoints). The load touches those rows only in step 7, so the row
// locks are held for a few short statements and the commit. A load that
// stalls there (paused, cut off) cannot make workers wait: heartbeats skip
// rows another transaction holds instead of waiting for them, so the other
// leases are renewed and only a lease on a row the load holds can run out;
// and the load runs with lock_timeout, statement_timeout and
// idle_in_transaction_session_timeout (Options; the worker load command
// defaults to 10s, 1h and 5s), set for its transaction, so the server ends
// a stalled load and releases its locks. Waiting for another load (step 1)
// is exempt from the first two. Like every
// other multi-row locker of tasks, it locks in partition_key order, so it
// cannot deadlock with batched heartbeats or claims.
//
// When the load only adds records it locks FOR NO KEY UPDATE, the
// distributor's lock for work-counter updates: it does not wait for a batch
// in flight, which holds its row FOR KEY SHARE and cannot see the new
// records before commit anyway. A worker only processes records up to
// available, and available is raised in the same transaction that inserts
// them, so no worker sees a seq it cannot read.
//
// When the load changes the tiers of an existing contract it locks FOR
// UPDATE instead, and checks position = 0 under that lock. FOR UPDATE
// conflicts with a batch's fence, so the load first waits for a batch in
// flight (which may have read the old tiers) to end, and batches that
// start later wait for the load's commit and then read the new tiers. If a
// batch priced records meanwhile, position is no longer 0 and the load
// fails as a whole; running it again reports the contract's tiers as
// frozen. Loads are rare and quick to lock, so waiting for one batch is
// acceptable here, and only here.
//
// The direct copy adds nothing to this: it reads available without a row
// lock under the load lock (step 1), as the staged path does, and the
// chunks it writes, and rewrites when it removes re-deliveries, are this
// load's own, invisible to workers until commit.
//
// A load that fails at any point rolls back completely: staging tables,
// contracts, tiers, records, task rows and the loads row.
//
// # Figures
//
// worker load --records with the default flags (128 MiB), after the
// tiers, into a local PostgreSQL 15 (fsync off), on a 2-core machine that
// others used at the same time (single runs vary by a third); files from
// worker seed, 1,000 records per contract, contracts interleaved
// ("grouped": the same file sorted by contract). psql \copy of the same
// file into a plain table of its three columns ran right after each load:
//
//	records       load records/s  peak RSS  psql \copy records/s  load ÷ psql
//	1M                  950,453    80 MiB           1,526,604         0.62
//	1M                  744,499    79 MiB           1,245,175         0.60
//	10M                 637,815   204 MiB           1,059,726         0.60
//	10M grouped       1,243,902   200 MiB           1,571,000         0.79
//	30M                 738,513   203 MiB           1,482,806         0.50
//
// So 10M records ran at 0.75 and 30M at 0.87 of the 1M rate (their mean);
// another run of 10M gave 905,103 (0.69 of psql). Memory stays at the
// budget whatever the size. Before the stream (rows held up to 256 MiB,
// larger files staged): 1M at 816,762 records/s (97 MiB), 10M at 72,510
// (366 MiB, 0.065 of psql), of which, in a run of 181 s, the staging COPY
// took 17 s, the search for repeated ids 40 s and the INSERT ... SELECT
// 108 s. BenchmarkLoad measures the same against psql in one process.
//
// With the exact key set instead of a Bloom filter (same setup, load
// average 2.4 to 5.4, each load and its \copy back to back):
//
//	records       load records/s  peak RSS  psql \copy records/s  load ÷ psql
//	1M                  706,314   114 MiB           1,158,158         0.61
//	1M                  632,549   114 MiB           1,164,712         0.54
//	10M                 767,665   197 MiB           1,742,542         0.44
//	20M (100,000 contracts)  464,973   199 MiB      1,230,773         0.38
//	100M                337,987   197 MiB           1,350,427         0.25
//
// The filter had sent 100M records to the staged path (50,029 records/s,
// 209 MiB); they now stay on the direct copy, and grouping the keys of
// 10M records takes about 1 s. What slowed the larger files was their
// 100,000 contracts interleaved: the open chunks' 3/8 of the budget held
// about 16 records per contract, so chunks averaged 16 records (20M
// records made 1.2M chunks, against hundreds of records a chunk for
// 10,000 contracts), and the server's COPY of those rows took 29 s of a
// 33 s load. The arrays are stored uncompressed, so compression cost
// nothing there.
//
// With the spill files (whole chunks whatever the interleaving; same
// setup, while a long benchmark ran on the machine, load average 2.8 to
// 10, each load and its \copy back to back; psql itself varied from
// 0.47M to 1.5M records/s with the load):
//
//	records                 load records/s  peak RSS  chunks   psql \copy records/s  load ÷ psql
//	1M                            1,001,714   116 MiB    1,000           1,308,401         0.77
//	1M                              875,969   104 MiB    1,000           1,477,985         0.59
//	10M                             804,988   199 MiB   10,000           1,198,130         0.67
//	20M (100,000 contracts)         760,428   198 MiB  100,000           1,458,541         0.52
//	100M (100,000 contracts)        780,526   200 MiB  100,000           1,519,458         0.51
//
// 100M ran at 0.83 of the 1M rate (the two 1M runs' mean, 938,842) and
// 0.78 to 0.89 of each. Later runs, as the machine got busier, gave 1M
// at 424,882 to 646,384 (0.58 to 0.91 of psql), 10M at 467,661 to
// 797,563 (0.55 to 0.61) and 20M at 342,283 to 637,403 (0.43 to 0.44). The load of an interleaved file is now in three
// parts: reading the file while the records go to the spill files (the
// client's CPU: parsing, checks, keys; the server waits), about half the
// time; reading the spill files back while the server takes the chunks
// (about 26 bytes a record spilled: 0.5 GB for 20M); then the key set's
// grouping and the task rows of 100,000 contracts (4 s in the producer's
// INSERT). A file grouped by contract, or whose records fit the budget,
// writes no spill file.
package ingest

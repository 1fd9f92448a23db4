package ingest

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/pgxconn"
	"github.com/batonhq/baton/internal/pgxwork"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing"
	"github.com/batonhq/baton/pricing/internal/reprice"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/pricing/rerate"
	"github.com/batonhq/baton/schema"
)

// taskKind is the kind of the task rows the loader creates, reads and adds
// records to (one per contract): the pricing workers'. Rows of other kinds
// named like a contract belong to other processors and are never read,
// locked or changed by a load.
const taskKind = pricer.Kind

// loadLockKey identifies the load lock among advisory locks ("baton-ld" as
// a 64-bit integer).
const loadLockKey int64 = 0x626174_6f6e2d6c64

// ErrInterrupted is returned, wrapped, by a load whose context ended
// before it began to commit: its transaction is rolled back (or was never
// begun), so nothing was loaded. Once the commit has begun it is not
// interrupted, so that a load never ends with its outcome unknown.
var ErrInterrupted = errors.New("interrupted: nothing was loaded")

// MaxListedDefault is the number of problems an *InvalidInputError lists
// when Options.MaxListed is zero.
const MaxListedDefault = 20

const progressEvery = 100_000

// The stages a load reports to Options.Progress after reading its files.
const (
	StageValidating = "validating"         // checking the rules across rows (known contracts, repeats, totals)
	StageInserting  = "inserting"          // storing the records and their indexes
	StageUpdating   = "updating contracts" // locking and updating the task rows
)

// Defaults of the worker load command's timeouts (Options leaves them off).
// The idle limit matches a worker's at the default lease: a stalled load
// holding task-row locks is ended before the leases it delays run out.
const (
	StatementTimeoutDefault         = time.Hour
	LockTimeoutDefault              = 10 * time.Second
	IdleInTransactionTimeoutDefault = 5 * time.Second
)

// Options say what to load and how to treat invalid rows.
type Options struct {
	// TiersPath and RecordsPath name the input files; give either or both.
	// Tiers are applied first, so records may refer to contracts that the
	// same load creates.
	TiersPath   string
	RecordsPath string
	// SkipInvalid loads the valid rows and writes every rejected row to
	// RejectPath. Without it a load is all-or-nothing: one invalid row and
	// nothing is loaded.
	SkipInvalid bool
	// RejectPath receives the rejected rows as CSV with the header
	// file,line,reason,row. It is required with SkipInvalid and only
	// allowed with it. It is written only if the load commits.
	RejectPath string
	// Reprice applies changed tier sets of contracts that already have
	// priced records (or are being re-priced): they become the contracts'
	// tiers and the contracts are re-priced under them, as a new
	// generation (package rerate). Without it such a change is refused.
	Reprice bool
	// Amend lets a records file correct stored records: a known record id
	// with another amount replaces the stored amount (the old one is kept
	// in the amendments table) and re-prices the contract from that
	// record on. Without it such a row is an error. Unknown ids load as
	// new records and the same id with the same amount is a re-delivery,
	// as always.
	Amend bool
	// Preview, with Reprice or Amend, starts the new generations as
	// previews (package rerate): priced without becoming current, the new
	// tiers and amounts kept with them, not made the contracts' own, until
	// approved (rerate.Store.Approve) or discarded, even for a contract
	// with nothing priced yet (its records, when they come, are priced
	// under both its tiers and the preview's).
	Preview bool
	// Reason and StartedBy are recorded with the generations and
	// amendments a load with Reprice or Amend starts.
	Reason    string
	StartedBy string
	// MaxListed caps the problems listed in an *InvalidInputError.
	// Zero means MaxListedDefault.
	MaxListed int
	// Progress, if set, is called about every 100,000 rows read from an
	// input file, and once more at its end, with the stage ("tiers" or
	// "records") and the rows read so far; then once as each later stage
	// begins (StageValidating, StageInserting, StageUpdating) with the
	// rows read in all.
	Progress func(stage string, rows int64)
	// ReadProgress, if set, is called whenever Progress is called for the
	// records file's rows, with the bytes of the file read so far and its
	// size (zero if it is not a regular file), for a rate and the time
	// left. After the direct copy gives way to the staged path, the file
	// is read again from the start, and so are the counts.
	ReadProgress func(rows, bytesRead, size int64)

	// StatementTimeout, LockTimeout and IdleInTransactionTimeout bound the
	// load's statements, lock waits and pauses between statements, set for
	// its transaction only (SET LOCAL), so they hold through a transaction
	// pooler too. Zero means no limit. Waiting for another load to finish
	// is exempt from the first two. The idle limit is what ends a stalled
	// loader (paused, cut off) holding task-row locks: the server ends its
	// session and the load rolls back.
	StatementTimeout         time.Duration
	LockTimeout              time.Duration
	IdleInTransactionTimeout time.Duration

	// MemoryLimit bounds the memory the load takes for the records file
	// (its records held until their chunks are written, the keys of
	// record ids, rejected rows and re-deliveries kept to the end),
	// whatever the file's size; see the package documentation. Chunks
	// are whole whatever the budget: a larger one keeps more records and
	// record keys in memory rather than in temporary files, and reads
	// the records' files back in larger parts. It must be at least 1 MiB. Defaults to
	// MemoryLimitDefault (128 MiB). Records written leave garbage, which
	// Go's collector lets grow to about the live heap before collecting
	// unless a soft limit is set (GOMEMLIMIT, debug.SetMemoryLimit):
	// worker load sets one at the budget plus 64 MiB, and peaked at about
	// 205 MiB of RSS with the default.
	MemoryLimit int64

	// ConfirmStandby makes a commit that did not wait for a synchronous
	// standby an unconfirmed one: Load returns a *NotReplicatedError
	// (committed, not confirmed) unless, after its COMMIT, the server
	// still makes commits wait for a synchronous standby. Without it that
	// is checked only when they waited as the load began, so a load that
	// starts on a server with no synchronous standby (a single server, an
	// asynchronous standby, an HA manager's primary already running
	// without its standby) returns nil as before. See docs/durability.md.
	ConfirmStandby bool

	// maxGross is the limit on a contract's cumulative gross; zero means
	// math.MaxInt64. Tests lower it.
	maxGross int64
	// staged turns the direct copy off. Tests and benchmarks set it.
	staged bool
	// budget, if set, is MemoryLimit below its minimum. Tests set it.
	budget int64
	// noTempFile has the direct copy's key set fail to make its
	// temporary file. Tests set it.
	noTempFile bool
	// recordKey, if set, gives the 64-bit key of a record id within its
	// contract instead of its hash. Tests set it, to make keys collide.
	recordKey func(contractID, recordID string) uint64
	// schema is the PostgreSQL schema holding baton's tables, the Store's.
	schema string
}

func (o Options) validate() error {
	if err := schema.Validate(o.schema); err != nil {
		return fmt.Errorf("invalid schema: %w", err)
	}
	switch {
	case o.TiersPath == "" && o.RecordsPath == "":
		return errors.New("nothing to load: give a tiers file, a records file or both")
	case o.SkipInvalid && o.RejectPath == "":
		return errors.New("skipping invalid rows needs a reject file to write them to")
	case !o.SkipInvalid && o.RejectPath != "":
		return errors.New("a reject file is only written when skipping invalid rows")
	case o.Reprice && o.TiersPath == "":
		return errors.New("re-pricing changed tiers needs a tiers file")
	case o.Amend && o.RecordsPath == "":
		return errors.New("amending records needs a records file")
	case o.Preview && !o.Reprice && !o.Amend:
		return errors.New("a preview is of a re-pricing: give Reprice or Amend with Preview")
	case o.MaxListed < 0:
		return fmt.Errorf("MaxListed is %d, want ≥ 0", o.MaxListed)
	case o.MemoryLimit != 0 && o.MemoryLimit < minMemoryLimit:
		return fmt.Errorf("MemoryLimit is %d bytes, want at least %d (1 MiB), or 0 for the default", o.MemoryLimit, minMemoryLimit)
	case o.StatementTimeout < 0 || o.LockTimeout < 0 || o.IdleInTransactionTimeout < 0:
		return errors.New("timeouts must not be negative (zero means no limit)")
	case o.RejectPath != "" && (sameFile(o.RejectPath, o.TiersPath) || sameFile(o.RejectPath, o.RecordsPath)):
		return fmt.Errorf("the reject file %s is also an input file", o.RejectPath)
	case o.TiersPath != "" && sameFile(o.TiersPath, o.RecordsPath):
		return fmt.Errorf("%s is given both as the tiers and as the records file", o.TiersPath)
	}
	return nil
}

func sameFile(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

// Report describes a load.
type Report struct {
	LoadID             int64 // loads.load_id; records.load_id of the records added
	TierRows           int64 // valid tier rows (including unchanged re-deliveries of a tier set)
	ContractsCreated   int64 // contracts new to the database
	RecordsAccepted    int64 // records added
	RecordsRedelivered int64 // records skipped as identical to one stored or earlier in the file
	RowsRejected       int64 // invalid rows of both files
	RecordsAmended     int64 // stored records whose amount this load replaced (Options.Amend)
	// ContractsRepriced is the contracts whose tiers changed
	// (Options.Reprice) or whose records were amended for which a new
	// generation started: they had priced records the change affects.
	// The others' next batches price the change.
	ContractsRepriced int64
	// DirectCopy is true when the records were copied straight into the
	// record_chunks table, false when the staged path stored them (see the
	// package documentation).
	DirectCopy bool
	Duration   time.Duration

	gaveWay  string // why the direct copy gave way to the staged path
	keysPeak int64  // most memory the direct copy's key set held (tests)
	spilled  int64  // bytes of records the direct copy wrote to its spill files (tests)
	heldPeak int64  // most memory the direct copy's open chunks held (tests)
}

// Load loads a tiers file, a records file or both in one transaction. See
// the package documentation for the rules and the transaction.
//
// If rows are invalid and opts.SkipInvalid is false, nothing is loaded and
// the error is an *InvalidInputError listing them. A file that is not a
// tiers or records file at all (header, empty, unreadable CSV) fails the load
// with an *InvalidInputError even with SkipInvalid.
func (s *Store) Load(ctx context.Context, opts Options) (Report, error) {
	opts.schema = s.t.Schema
	return load(ctx, s.t.DB.DB, opts)
}

// load is Load on db, for the tables in opts.schema.
func load(ctx context.Context, db *bun.DB, opts Options) (Report, error) {
	start := time.Now()
	if err := opts.validate(); err != nil {
		return Report{}, fmt.Errorf("loading: %w", err)
	}
	if opts.MaxListed == 0 {
		opts.MaxListed = MaxListedDefault
	}
	if opts.maxGross == 0 {
		opts.maxGross = math.MaxInt64
	}
	if opts.MemoryLimit == 0 {
		opts.MemoryLimit = MemoryLimitDefault
	}
	if opts.budget > 0 {
		opts.MemoryLimit = opts.budget
	}
	l := &loader{opts: opts}

	// Open the inputs and check their headers before touching the database.
	if opts.TiersPath != "" {
		f, err := os.Open(opts.TiersPath)
		if err != nil {
			return Report{}, fmt.Errorf("loading tiers: %w", err)
		}
		defer f.Close()
		if l.tiers, err = NewTiersReader(bufio.NewReaderSize(f, 1<<16), opts.TiersPath); err != nil {
			return Report{}, wrapInput("loading tiers from "+opts.TiersPath, err)
		}
	}
	if opts.RecordsPath != "" {
		f, err := l.openRecords()
		if err != nil {
			return Report{}, err
		}
		defer func() { l.recordsFile.Close() }()
		// Only a file that can be read again may take the direct copy:
		// when it gives way, the staged path reads the file from the
		// start.
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			l.recordsSize = st.Size()
		} else {
			l.opts.staged = true
		}
	}

	conn, err := db.Conn(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return Report{}, ErrInterrupted
		}
		return Report{}, fmt.Errorf("loading: acquiring a database connection: %w", err)
	}
	defer conn.Close()
	var rep Report
	err = pgxconn.Raw(conn.Conn, func(pc *pgx.Conn) error {
		var err error
		rep, err = l.run(ctx, pc)
		return err
	})
	rep.Duration = time.Since(start)
	if err != nil && ctx.Err() != nil && !l.committing {
		// Whatever the statement the interruption cut short, the
		// transaction did not commit.
		err = fmt.Errorf("%w (the load was rolled back)", ErrInterrupted)
	}
	return rep, err
}

// wrapInput leaves an *InvalidInputError as it is (its lines name the file)
// and wraps anything else.
func wrapInput(doing string, err error) error {
	var ie *InvalidInputError
	if errors.As(err, &ie) {
		return err
	}
	return fmt.Errorf("%s: %w", doing, err)
}

type loader struct {
	opts           Options
	tiers          *TiersReader
	records        *RecordsReader
	recordsFile    *os.File
	recordsSize    int64        // the records file's size, if a regular file
	recordsRead    *countReader // bytes of the records file read
	rep            Report
	rowsRead       int64           // input rows read so far, both files
	staged         map[string]bool // stages reported to Options.Progress
	repeatsChecked bool            // checkRepeats has run
	affectedStale  bool            // load_affected needs collecting again
	committing     bool            // the commit has begun: its outcome is not ErrInterrupted
}

// recordsProgress reports rows of the records file read.
func (l *loader) recordsProgress(rows int64) {
	if l.opts.Progress != nil {
		l.opts.Progress("records", rows)
	}
	if l.opts.ReadProgress != nil {
		l.opts.ReadProgress(rows, l.recordsRead.n.Load(), l.recordsSize)
	}
}

// openRecords opens the records file (again) and checks its header.
func (l *loader) openRecords() (*os.File, error) {
	if l.recordsFile != nil {
		l.recordsFile.Close()
	}
	f, err := os.Open(l.opts.RecordsPath)
	if err != nil {
		return nil, fmt.Errorf("loading records: %w", err)
	}
	l.recordsFile = f
	l.recordsRead = &countReader{r: f}
	if l.records, err = NewRecordsReader(bufio.NewReaderSize(l.recordsRead, 1<<16), l.opts.RecordsPath); err != nil {
		return nil, wrapInput("loading records from "+l.opts.RecordsPath, err)
	}
	return f, nil
}

// exec runs one step of the load, naming it in any error.
func exec(ctx context.Context, tx pgx.Tx, doing, sql string, args ...any) (int64, error) {
	tag, err := tx.Exec(ctx, sql, args...)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", doing, err)
	}
	return tag.RowsAffected(), nil
}

func (l *loader) run(ctx context.Context, conn *pgx.Conn) (Report, error) {
	rep := &l.rep
	// READ COMMITTED: once the load lock is held, each statement sees every
	// load committed before (the last load id, each contract's available).
	ptx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return *rep, fmt.Errorf("loading: starting the transaction: %w", err)
	}
	defer func() { _ = ptx.Rollback(context.WithoutCancel(ctx)) }() // a no-op after Commit
	var tx pgx.Tx = schemaTx{ptx, l.opts.schema}

	// From the first statement on, a pause between statements ends the
	// session; waiting for another load is not limited.
	if _, err := exec(ctx, tx, "loading: configuring the transaction", fmt.Sprintf(
		"SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0; SET LOCAL idle_in_transaction_session_timeout = %d",
		l.opts.IdleInTransactionTimeout.Milliseconds())); err != nil {
		return *rep, err
	}
	began, err := readSyncState(ctx, tx)
	if err != nil {
		return *rep, fmt.Errorf("loading: %w", err)
	}
	if _, err := exec(ctx, tx, "loading: waiting for other loads to finish",
		"SELECT pg_advisory_xact_lock($1)", loadLockKey); err != nil {
		return *rep, err
	}
	if err := tx.QueryRow(ctx, sqlInsertLoad, nullIfEmpty(l.opts.TiersPath), nullIfEmpty(l.opts.RecordsPath),
		cmp.Or(l.opts.schema, schema.Default)).Scan(&rep.LoadID); err != nil {
		return *rep, fmt.Errorf("loading: recording the load: %w", err)
	}
	// Sorts and hashes over the staged rows stay in memory up to this
	// size; compiling the load's one-off queries is not worth it.
	if _, err := exec(ctx, tx, "loading: configuring the transaction", fmt.Sprintf(
		"SET LOCAL work_mem = '64MB'; SET LOCAL jit = off; SET LOCAL statement_timeout = %d; SET LOCAL lock_timeout = %d",
		l.opts.StatementTimeout.Milliseconds(), l.opts.LockTimeout.Milliseconds())); err != nil {
		return *rep, err
	}
	if _, err := exec(ctx, tx, "loading: creating staging tables", sqlCreateStaging); err != nil {
		return *rep, err
	}

	if l.tiers != nil {
		if err := l.stageTiers(ctx, tx); err != nil {
			return *rep, wrapInput("loading tiers from "+l.opts.TiersPath, err)
		}
	}
	direct := false
	if l.records != nil {
		if direct, err = l.loadRecords(ctx, tx); err != nil {
			return *rep, wrapInput("loading records from "+l.opts.RecordsPath, err)
		}
	}
	if err := l.countRejected(ctx, tx); err != nil {
		return *rep, err
	}
	if l.records != nil && !direct {
		l.stage(StageInserting)
		err := l.insertRecords(ctx, tx)
		if err != nil {
			return *rep, wrapInput("loading records from "+l.opts.RecordsPath, err)
		}
	}
	var rejectTmp string
	if l.opts.SkipInvalid {
		if rejectTmp, err = l.writeRejects(ctx, tx); err != nil {
			return *rep, err
		}
		defer func() {
			if rejectTmp != "" {
				os.Remove(rejectTmp)
			}
		}()
	}
	l.stage(StageUpdating)
	if err := l.finish(ctx, tx); err != nil {
		return *rep, err
	}
	// An interruption from here on would leave the outcome unknown: the
	// commit is not interrupted.
	l.committing = true
	watch := pgxconn.WatchPgx(conn)
	cerr := tx.Commit(context.WithoutCancel(ctx))
	var unconfirmed error
	if watch.NotReplicated() {
		// Committed on the primary, whatever the COMMIT returned.
		unconfirmed = &NotReplicatedError{LoadID: rep.LoadID, CommitErr: cerr}
	} else if cerr != nil {
		return *rep, fmt.Errorf("loading: committing: %w", cerr)
	} else if began.waits || l.opts.ConfirmStandby {
		// Did the commit wait? Replication turned off before it returned
		// shows in the next statement (readSyncState).
		after, err := readSyncState(context.WithoutCancel(ctx), conn)
		switch {
		case err != nil:
			unconfirmed = &NotReplicatedError{LoadID: rep.LoadID, Unsynchronized: "its settings could not be read: " + err.Error()}
		case !after.waits:
			unconfirmed = &NotReplicatedError{LoadID: rep.LoadID, Unsynchronized: after.why}
		}
	}
	if rejectTmp != "" {
		if err := os.Rename(rejectTmp, l.opts.RejectPath); err != nil {
			return *rep, errors.Join(unconfirmed, fmt.Errorf("load %d committed, but writing the reject file: %w", rep.LoadID, err))
		}
		rejectTmp = ""
	}
	return *rep, unconfirmed
}

// countRejected counts the invalid rows. If there are any and the load is
// all-or-nothing, it returns the *InvalidInputError that ends the load,
// after completing the checks so that every problem is counted.
func (l *loader) countRejected(ctx context.Context, tx pgx.Tx) error {
	count := func() error {
		if err := tx.QueryRow(ctx, sqlCountRejected).Scan(&l.rep.RowsRejected); err != nil {
			return fmt.Errorf("loading: counting invalid rows: %w", err)
		}
		return nil
	}
	if err := count(); err != nil {
		return err
	}
	if l.rep.RowsRejected == 0 || l.opts.SkipInvalid {
		return nil
	}
	if l.records != nil && !l.repeatsChecked {
		if err := l.checkRepeats(ctx, tx); err != nil {
			return wrapInput("loading records from "+l.opts.RecordsPath, err)
		}
		if err := count(); err != nil {
			return err
		}
	}
	ie, err := l.listErrors(ctx, tx)
	if err != nil {
		return err
	}
	return ie
}

// sqlInsertLoad records the load under the next id after the last
// committed load's. Loads hold the load lock from before this statement to
// their commit, so no other load can take the same id, and a load that
// fails or is rolled back leaves no gap: ids count committed loads, and
// the first load that succeeds is load 1 however many failed before it.
// (Ids taken from the column's sequence were used up by failed loads too.)
// The sequence is still advanced, so that it stays at or above every id
// and a writer that takes ids from it (a loader of an earlier release,
// during an upgrade) cannot collide with one.
const sqlInsertLoad = `
WITH seq AS (SELECT nextval(pg_get_serial_sequence(format('%I.loads', $3::text), 'load_id')))
INSERT INTO {{.Schema}}.loads (load_id, tiers_file, records_file)
SELECT coalesce((SELECT max(load_id) FROM {{.Schema}}.loads), 0) + 1, $1, $2 FROM seq
RETURNING load_id`

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// sqlLockTasks locks the task rows of the affected contracts in
// partition_key order, the order every multi-row locker of tasks uses, so
// that loads, heartbeats and claims cannot deadlock. LockRows sits above
// the Sort, so rows are locked in that order. %s is the lock strength:
//
//   - FOR NO KEY UPDATE when the load only adds records. That is the
//     distributor's lock for work-counter updates: it waits for heartbeats
//     and ownership changes but not for batches in flight (which hold FOR
//     KEY SHARE), and the records it adds are invisible to them until
//     commit anyway.
//   - FOR UPDATE when the tiers of an existing contract change. That waits
//     for a batch in flight on the contract, which may have read the old
//     tiers, to commit or roll back, and makes later batches' fences wait
//     for this commit, so they read the new tiers. The position check that
//     follows therefore sees every record priced with the old tiers.
const sqlLockTasks = `
SELECT count(*) FROM (
    SELECT 1 FROM {{.Schema}}.tasks t JOIN load_affected a ON a.contract_id = t.partition_key
     WHERE t.kind = '` + taskKind + `' AND (a.n_new > 0 OR a.tiers_changed OR a.rerate)
     ORDER BY t.partition_key FOR %s OF t
) locked`

// sqlCheckLocked finds the locked task rows that moved since they were
// read; the first (in contract order) is reported. There are normally
// none, so it has no LIMIT: with one, the planner expects a match early
// and walks tasks in key order against a scan of load_affected per row,
// quadratic in the contracts (306 s for 100,000); without, it hashes.
const sqlCheckLocked = `
SELECT a.contract_id, t.position, t.available, coalesce(a.base, -1), a.tiers_changed
  FROM load_affected a JOIN {{.Schema}}.tasks t ON t.kind = '` + taskKind + `' AND t.partition_key = a.contract_id
 WHERE (a.tiers_changed AND t.position > 0) OR (a.n_new > 0 AND t.available IS DISTINCT FROM a.base)
 ORDER BY a.contract_id`

// finish records the load's counts and, as the last statements before
// commit, locks and updates the task rows.
func (l *loader) finish(ctx context.Context, tx pgx.Tx) error {
	rep := &l.rep
	if _, err := exec(ctx, tx, "loading: recording the load", `
UPDATE {{.Schema}}.loads SET finished_at = clock_timestamp(), tier_rows = $2, records_accepted = $3,
       records_redelivered = $4, rows_rejected = $5
 WHERE load_id = $1`, rep.LoadID, rep.TierRows, rep.RecordsAccepted, rep.RecordsRedelivered, rep.RowsRejected); err != nil {
		return err
	}
	if l.records == nil {
		// Tier changes of existing contracts need the check.
		if err := l.collectAffected(ctx, tx); err != nil {
			return fmt.Errorf("loading: %w", err)
		}
	}
	if l.opts.Reprice || l.opts.Amend {
		if _, err := exec(ctx, tx, "loading: collecting contracts to re-price", sqlAffectedRerate); err != nil {
			return err
		}
	}
	// load_affected was filled in this transaction: give the planner its
	// size for the joins with tasks below.
	if _, err := exec(ctx, tx, "loading: analysing the affected contracts", "ANALYZE load_affected"); err != nil {
		return err
	}
	var tiersChange bool
	if err := tx.QueryRow(ctx, "SELECT coalesce(bool_or(tiers_changed OR rerate), false) FROM load_affected").Scan(&tiersChange); err != nil {
		return fmt.Errorf("loading: collecting contracts: %w", err)
	}
	strength := "NO KEY UPDATE"
	if tiersChange {
		strength = "UPDATE"
	}
	if _, err := exec(ctx, tx, "loading: locking task rows", fmt.Sprintf(sqlLockTasks, strength)); err != nil {
		return err
	}
	var (
		contract         string
		pos, avail, base int64
		tiersChanged     bool
	)
	err := tx.QueryRow(ctx, sqlCheckLocked).Scan(&contract, &pos, &avail, &base, &tiersChanged)
	switch {
	case err == nil && tiersChanged && pos > 0:
		return fmt.Errorf("loading: contract %s had records priced while this load ran (position %d), so its tiers can no longer change without --reprice; nothing was loaded", contract, pos)
	case err == nil:
		return fmt.Errorf("loading: tasks.available of contract %s changed from %d to %d during the load; is something other than a load adding records? nothing was loaded", contract, base, avail)
	case !errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("loading: checking task rows: %w", err)
	}
	if l.opts.Reprice || l.opts.Amend {
		if err := l.rerate(ctx, tx); err != nil {
			return err
		}
	}
	if rep.RecordsAccepted > 0 {
		// The producer API adds the work and notifies at commit; the rows
		// are already locked, in its order, by the statement above.
		work, err := l.newWork(ctx, tx)
		if err != nil {
			return err
		}
		w := pgxwork.Work{Keys: make([]string, len(work)), N: make([]int64, len(work))}
		for i, x := range work {
			w.Keys[i], w.N[i] = x.Key, x.N
		}
		if err := pgxwork.AddWorks(ctx, tx, l.opts.schema, taskKind, w); err != nil {
			return fmt.Errorf("loading: %w", err)
		}
	}
	return nil
}

// newWork is the records each contract gains from this load.
func (l *loader) newWork(ctx context.Context, tx pgx.Tx) ([]partition.Work, error) {
	rows, err := tx.Query(ctx, `SELECT contract_id, n_new FROM load_affected WHERE n_new > 0`)
	if err != nil {
		return nil, fmt.Errorf("loading: collecting new work: %w", err)
	}
	work, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (partition.Work, error) {
		var w partition.Work
		err := r.Scan(&w.Key, &w.N)
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("loading: collecting new work: %w", err)
	}
	return work, nil
}

// sqlAffectedRerate adds to load_affected the contracts this load
// re-prices (changed tiers with Options.Reprice, amended records with
// Options.Amend), so that their task rows are locked with the others, in
// the same order, FOR UPDATE (reprice.Start waits for a batch in flight).
// The ones not there yet are found with EXCEPT, which hashes or sorts
// both sides whatever the planner thinks load_affected holds: with NOT
// EXISTS, a load_affected emptied by collectAffected (dead rows, analysed
// as empty) was scanned once per contract, 0.9 s for 10,000.
const sqlAffectedRerate = `
WITH c AS (
    SELECT contract_id FROM load_reprice
    UNION
    SELECT contract_id FROM load_records WHERE err IS NULL AND amend_seq IS NOT NULL
), upd AS (
    UPDATE load_affected a SET rerate = true FROM c WHERE a.contract_id = c.contract_id
    RETURNING a.contract_id
)
INSERT INTO load_affected (contract_id, n_new, n_redelivered, tiers_changed, ord, rerate)
SELECT contract_id, 0, 0, false, 0, true
  FROM (SELECT contract_id FROM c EXCEPT SELECT contract_id FROM load_affected) n`

// sqlApplyAmendments replaces the amounts of the amended records in their
// chunks: each amendment finds its chunk on the primary key (the last to
// start at or before its seq), the amendments are grouped by chunk, and
// each chunk is written once with its own (its index within the chunk,
// new amount) pairs, however many of its records change. Joined to every
// amendment of the file instead, each chunk read them all: 9.6 s for one
// amendment in each of 10,000 contracts. A chunk with one amendment (the
// usual case) gets its new array by slicing, in C, rather than by
// unnesting and aggregating it (0.76 s against 1.41 s for those 10,000).
const sqlApplyAmendments = `
WITH a AS (
    SELECT c.contract_id, c.first_seq, array_agg(r.amend_seq - c.first_seq + 1) AS idx, array_agg(r.amount_minor) AS amounts
      FROM load_records r
     CROSS JOIN LATERAL (SELECT k.contract_id, k.first_seq FROM {{.Schema}}.record_chunks k
                          WHERE k.contract_id = r.contract_id AND k.first_seq <= r.amend_seq
                          ORDER BY k.first_seq DESC LIMIT 1) c
     WHERE r.err IS NULL AND r.amend_seq IS NOT NULL
     GROUP BY c.contract_id, c.first_seq
)
UPDATE {{.Schema}}.record_chunks c
   SET amounts = CASE WHEN cardinality(a.idx) = 1
                      THEN c.amounts[:a.idx[1] - 1] || a.amounts[1] || c.amounts[a.idx[1] + 1:]
                      ELSE (SELECT array_agg(coalesce(m.amount, u.amount) ORDER BY u.i)
                              FROM unnest(c.amounts) WITH ORDINALITY AS u (amount, i)
                              LEFT JOIN unnest(a.idx, a.amounts) AS m (i, amount) ON m.i = u.i) END
  FROM a
 WHERE c.contract_id = a.contract_id AND c.first_seq = a.first_seq`

// sqlRecordAmendments keeps the amounts replaced, each with the
// generation that prices the new one (the one being priced or previewed if
// re-pricing started one, the current one otherwise), and whether it waits
// as a preview's ($3).
const sqlRecordAmendments = `
INSERT INTO {{.Schema}}.amendments (contract_id, record_id, seq, old_amount_minor, new_amount_minor, load_id, generation, reason, preview)
SELECT r.contract_id, r.record_id, r.amend_seq, r.amend_old, r.amount_minor, $1,
       coalesce((SELECT g.generation FROM {{.Schema}}.generations g WHERE g.contract_id = r.contract_id AND g.state IN ('pricing', 'preview')),
                (SELECT c.current_generation FROM {{.Schema}}.contracts c WHERE c.contract_id = r.contract_id)),
       $2, $3
  FROM load_records r
 WHERE r.err IS NULL AND r.amend_seq IS NOT NULL
 ORDER BY r.contract_id, r.amend_seq`

// rerate applies the amendments (but for a preview, whose amendments
// wait with it) and starts the re-pricing of the contracts whose tiers
// changed or records were amended, with the task rows locked.
func (l *loader) rerate(ctx context.Context, tx pgx.Tx) error {
	var n int64
	if !l.opts.Preview {
		var err error
		if n, err = exec(ctx, tx, "loading: amending records", sqlApplyAmendments); err != nil {
			return err
		}
	}
	var reqs []rerate.Request
	rows, err := tx.Query(ctx, `
SELECT contract_id, min(amend_seq) - 1, NULL::bigint[], NULL::bigint[], count(*)
  FROM load_records WHERE err IS NULL AND amend_seq IS NOT NULL GROUP BY contract_id
UNION ALL
SELECT t.contract_id, 0, array_agg(t.threshold_minor ORDER BY t.threshold_minor), array_agg(t.discount_bp ORDER BY t.threshold_minor), 0
  FROM load_tiers t JOIN load_reprice r ON r.contract_id = t.contract_id
 WHERE t.err IS NULL GROUP BY t.contract_id`)
	if err != nil {
		return fmt.Errorf("loading: collecting contracts to re-price: %w", err)
	}
	var (
		contract     string
		from, amends int64
		th, bp       []int64
	)
	_, err = pgx.ForEachRow(rows, []any{&contract, &from, &th, &bp, &amends}, func() error {
		r := rerate.Request{Contract: contract, From: from, Reason: l.opts.Reason, StartedBy: l.opts.StartedBy, Preview: l.opts.Preview}
		if th != nil {
			r.NewTiers = make([]pricing.Tier, len(th))
			for i := range th {
				r.NewTiers[i] = pricing.Tier{ThresholdMinor: th[i], DiscountBP: bp[i]}
			}
		}
		l.rep.RecordsAmended += amends
		reqs = append(reqs, r)
		return nil
	})
	if err != nil {
		return fmt.Errorf("loading: collecting contracts to re-price: %w", err)
	}
	if n == 0 && l.rep.RecordsAmended > 0 && !l.opts.Preview {
		return fmt.Errorf("loading: %d records to amend, but no chunk holds them", l.rep.RecordsAmended)
	}
	started, err := reprice.Start(ctx, reprice.Pgx(tx), l.opts.schema, reqs)
	if err != nil {
		return fmt.Errorf("loading: %w; nothing was loaded", err)
	}
	for _, s := range started {
		if s.Generation > 0 {
			l.rep.ContractsRepriced++
		}
	}
	if _, err := exec(ctx, tx, "loading: recording amendments", sqlRecordAmendments, l.rep.LoadID, l.opts.Reason, l.opts.Preview); err != nil {
		return err
	}
	return nil
}

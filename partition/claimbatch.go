package partition

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
)

// ErrClaimLost is returned by FenceUnowned and ClaimAdvance when the
// candidate was not won: its version moved (someone else claimed it), it is
// no longer claimable, another transaction holds its row in a conflicting
// mode, or it names an owner (a takeover, which must be claimed with Claim
// and confirmed).
var ErrClaimLost = errors.New("claim lost: the candidate is no longer claimable at the version read")

// claimLockClass is the first key of the transaction-scoped advisory lock
// (class, hash of the partition key) that FenceUnowned takes so that two
// claim transactions do not both process the same partition: it lives in
// the two-key space, apart from bigint advisory keys (package lock, loads).
const claimLockClass = 0x62746e31

// FenceUnowned is the fence of a claim's first batch, for a partition
// nobody owns (never owned, or released), inside tx, before the claim: it
// locks the row FOR KEY SHARE where it is still the candidate (same
// version, no owner) and claimable, and returns its checkpoint. Locked
// rows are skipped (ErrClaimLost): a claim or another change of ownership
// is under way.
//
// Until tx ends no change of ownership can commit on the row (they all
// lock FOR UPDATE, which conflicts with FOR KEY SHARE; Claim skips it),
// while producers (FOR NO KEY UPDATE) still add work without waiting. The
// claim itself comes at the end of the batch, in ClaimAdvance, a
// compare-and-set on the version read here.
//
// FOR KEY SHARE does not exclude another claim transaction's fence, so the
// fence also takes a transaction-scoped advisory lock on the partition,
// without waiting (ErrClaimLost if another claim transaction holds it): two
// workers racing for one partition do not both process it, only for one to
// lose at ClaimAdvance. Safety does not rest on it (two keys sharing a hash
// only exclude each other): ClaimAdvance's compare-and-set decides.
func (s *Store) FenceUnowned(ctx context.Context, tx bun.Tx, c Candidate) (Checkpoint, error) {
	var cp Checkpoint
	var state []byte
	err := tx.QueryRowContext(ctx, s.sql(`
		SELECT position, available, checkpoint, coalesce(traceparent, '')
		FROM {{.Schema}}.tasks
		WHERE partition_key = ? AND version = ? AND owner IS NULL
		  AND available > position AND failed_at IS NULL AND lease_expires_at <= now()
		  AND pg_try_advisory_xact_lock(?, hashtext(partition_key))
		FOR KEY SHARE SKIP LOCKED`), c.Key, c.Version, claimLockClass).Scan(&cp.Position, &cp.Available, &state, &cp.Traceparent)
	if errors.Is(err, sql.ErrNoRows) {
		return cp, fmt.Errorf("fencing %s@v%d for its claim: %w", c.Key, c.Version, ErrClaimLost)
	}
	if err != nil {
		return cp, fmt.Errorf("fencing %s@v%d for its claim: %w", c.Key, c.Version, err)
	}
	cp.State = state
	return cp, nil
}

// ClaimAdvance ends the first batch of an unowned partition fenced by
// FenceUnowned in the same tx, in one statement: Claim's compare-and-set
// (FOR UPDATE SKIP LOCKED, version still c.Version, no owner, claimable),
// Advance's checkpoint compare-and-set (position still from), and, with
// release, ReleaseFor's hand-back (claimable at once, waiting workers
// notified at commit if work is still pending). The claim's version is
// c.Version+1; the lease runs for ttl from this statement's arrival
// (statement_timestamp(), not the transaction's start, which may be a long
// batch earlier: nothing renews the lease before the claim commits), so a
// caller's local deadline counts from the moment it sent this statement. A
// release bumps the version once more. A claim kept (no release) raises the
// worker's held count, as Claim does. The history gets "claimed",
// "first_batch" and, with release, "released" (with reason), all under
// the claim's version. The trace context of the span in ctx, if any, is
// stored with the checkpoint.
//
// It returns ErrClaimLost if the claim was not won (another transaction
// fences the row too, or the row moved): tx must then roll back, with its
// output. Everything commits together or not at all.
func (s *Store) ClaimAdvance(ctx context.Context, tx bun.Tx, owner string, ttl time.Duration, c Candidate,
	from, position int64, state json.RawMessage, release bool, reason string) (Lease, error) {
	l := Lease{Key: c.Key, Version: c.Version + 1}
	if state == nil {
		state = json.RawMessage(`{}`)
	}
	events, eargs := s.events(`, e AS (
			INSERT INTO {{.Schema}}.events (partition_key, kind, version, worker, position, items, detail)
			SELECT partition_key, ?, ?::bigint, ?, ?::bigint, NULL::bigint, NULL FROM u
			UNION ALL
			SELECT partition_key, ?, ?::bigint, ?, position, ?::bigint, NULL FROM u
			UNION ALL
			SELECT partition_key, ?, ?::bigint, ?, position, NULL::bigint, nullif(?, '') FROM u WHERE ?::boolean
		)`, EventClaimed, l.Version, owner, from,
		EventFirstBatch, l.Version, owner, position-from,
		EventReleased, l.Version, owner, reason, release)
	var n int
	err := tx.QueryRowContext(ctx, s.sql(`
		WITH c AS (
			SELECT t.partition_key
			FROM {{.Schema}}.tasks t
			WHERE t.partition_key = ? AND t.version = ? AND t.owner IS NULL AND t.position = ?
			  AND t.available > t.position AND t.failed_at IS NULL AND t.lease_expires_at <= now()
			FOR UPDATE OF t SKIP LOCKED
		), u AS (
			UPDATE {{.Schema}}.tasks t
			SET version = t.version + CASE WHEN ?::boolean THEN 2 ELSE 1 END,
			    owner = CASE WHEN ?::boolean THEN NULL ELSE ? END,
			    claimed_at = statement_timestamp(),
			    heartbeat_at = CASE WHEN ?::boolean THEN NULL ELSE statement_timestamp() END,
			    lease_expires_at = CASE WHEN ?::boolean THEN '-infinity' ELSE statement_timestamp() + ?::interval END,
			    position = ?, checkpoint = ?::jsonb, attempts = 0, last_error = NULL,
			    traceparent = nullif(?, ''), updated_at = now()
			FROM c
			WHERE t.partition_key = c.partition_key
			RETURNING t.partition_key, t.position, t.available > t.position AS pending
		), n AS (
			SELECT count(pg_notify(?, '`+NotifyReleased+`')) AS sent
			FROM (SELECT 1 FROM u WHERE ?::boolean AND pending LIMIT 1) p
		), wh AS (
			-- A claim kept past its first batch raises its worker's held
			-- count (FairShareLoad) as Claim does, here at the end of the
			-- transaction, so the worker row is locked only until the
			-- commit; one released in the same statement leaves it.
			UPDATE {{.Schema}}.workers SET held = held + 1
			WHERE instance_id = ? AND NOT ?::boolean AND EXISTS (SELECT 1 FROM u)
		)`+events+`
		SELECT count(*) FROM u CROSS JOIN n`),
		append([]any{c.Key, c.Version, from,
			release, release, owner, release, release, interval(ttl),
			position, string(state), traceparent(ctx), NotifyChannel, release, owner, release}, eargs...)...).Scan(&n)
	if err != nil {
		return l, fmt.Errorf("claiming %s with its first batch (checkpoint %d to %d): %w", l, from, position, err)
	}
	if n != 1 {
		return l, fmt.Errorf("claiming %s with its first batch: %w", l, ErrClaimLost)
	}
	return l, nil
}

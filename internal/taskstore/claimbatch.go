package taskstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton/partition"
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
func (s *Store) FenceUnowned(ctx context.Context, tx bun.Tx, c Candidate) (partition.Checkpoint, error) {
	fenced, err := s.FenceUnownedGroup(ctx, tx, []Candidate{c}, 1)
	if err != nil {
		return partition.Checkpoint{}, err
	}
	if len(fenced) == 0 {
		return partition.Checkpoint{}, fmt.Errorf("fencing %s@v%d for its claim: %w", c.Key, c.Version, ErrClaimLost)
	}
	return fenced[0].Checkpoint, nil
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
	from, position int64, state json.RawMessage, release bool, reason string) (partition.Lease, error) {
	leases, err := s.ClaimAdvanceGroup(ctx, tx, owner, ttl,
		[]ClaimStep{{Candidate: c, From: from, Position: position, State: state, Release: release}}, reason)
	return leases[0], err
}

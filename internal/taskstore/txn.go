package taskstore

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/partition"
)

// Txn runs the statements of one fenced transaction on its tx, as its
// worker (owner): the fences (Fence for a held partition's lease,
// FenceUnownedGroup for claims), the checkpoints and claims (Advance,
// ClaimAdvanceGroup), the history of a first batch (RecordFirstBatch) and
// the release of partitions caught up (ReleaseFor), so that a transaction
// takes its statements from one value made once (InTx). The Store methods
// of the same names, which take the transaction (and owner) on each call,
// run the same statements. A Txn is used by one goroutine, as its
// transaction is.
type Txn struct {
	s     *Store
	tx    bun.Tx
	owner string
}

// InTx returns the statements of the fenced transaction tx, run as owner.
func (s *Store) InTx(tx bun.Tx, owner string) Txn { return Txn{s: s, tx: tx, owner: owner} }

// ReleaseFor is Store.ReleaseFor in the transaction: the leases are
// released when it commits.
func (t Txn) ReleaseFor(ctx context.Context, reason string, leases []partition.Lease) ([]string, error) {
	return t.s.WithDB(t.tx).ReleaseFor(ctx, t.owner, reason, leases)
}

package distributor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/batonhq/baton/internal/dbconn"
	"github.com/batonhq/baton/partition"
	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"
)

// Processor processes a partition's work, one batch at a time.
type Processor interface {
	// Process handles the next work items of b.Lease.Key after
	// b.Checkpoint.Position (at most b.Limit of them), writing its output
	// through b.Tx, and returns the new checkpoint. The distributor records
	// the checkpoint in the same transaction and commits it only if the
	// claim is still current, so output and checkpoint are committed
	// together or not at all, and only by the partition's owner.
	//
	// ctx is cancelled when ownership is lost; Process must not keep
	// writing after that (its transaction would be rolled back anyway).
	// Side effects outside b.Tx are at least once: use b.IdempotencyKey.
	Process(ctx context.Context, b *Batch) (Result, error)
}

// ProcessorFunc adapts a function to Processor.
type ProcessorFunc func(ctx context.Context, b *Batch) (Result, error)

// Process calls f.
func (f ProcessorFunc) Process(ctx context.Context, b *Batch) (Result, error) { return f(ctx, b) }

// Batch is one unit of work handed to a Processor.
type Batch struct {
	// Lease is the claim under which the batch runs.
	Lease partition.Lease
	// Owner is this worker's instance id.
	Owner string
	// Tx is the fenced transaction: the task row is locked and verified
	// to belong to Lease.
	Tx bun.Tx
	// Conn is the connection Tx runs on (zero when the batch was built
	// without one). Use it only through Raw.
	Conn bun.Conn
	// Checkpoint is the committed progress, read under the fence.
	Checkpoint partition.Checkpoint
	// Limit is the most work items to process.
	Limit int
}

// ErrNoConn is returned by Batch.Raw for a batch built without its
// connection.
var ErrNoConn = errors.New("batch has no connection")

// Raw calls fn with the pgx connection that the batch's transaction runs on,
// for what database/sql cannot express: COPY, binary-format parameters and
// results. Statements sent through it run inside the fenced transaction, so
// they are committed with the checkpoint or not at all. fn must not commit,
// roll back or begin a transaction, and must not keep the connection after
// it returns.
func (b *Batch) Raw(fn func(conn *pgx.Conn) error) error {
	if b.Conn.Conn == nil {
		return ErrNoConn
	}
	return dbconn.Raw(b.Conn.Conn, fn)
}

// IdempotencyKey names the batch's items for side effects outside the
// database: the same items always get the same key, whoever processes them.
func (b *Batch) IdempotencyKey() string {
	return fmt.Sprintf("%s/%d", b.Lease.Key, b.Checkpoint.Position)
}

// Result is a batch's new checkpoint.
type Result struct {
	// Position is the new checkpoint position; it must lie in
	// (Checkpoint.Position, Checkpoint.Available].
	Position int64
	// State is processor-defined checkpoint state (JSON), stored with
	// Position. Nil stores {}.
	State json.RawMessage
}

// Package pgxwork runs package partition's producer statements (adding
// work, rewinding) in a transaction on a pgx connection, for baton's own
// code whose transaction is pgx's (the loader, which streams records with
// COPY, and the re-rating it starts). The statements, their lock order
// and their notifications are partition.Store's own: package partition
// installs these functions when it is initialised (every caller imports
// it for its types). The public API offers only partition.Store's methods
// on a bun.Tx.
package pgxwork

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Tx is a pgx transaction (pgx.Tx), or a *pgx.Conn inside one.
type Tx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Work is the work to add: n[i] items to partition keys[i].
type Work struct {
	Keys []string
	N    []int64
}

// Rewinds is the rewinds to make: partition Keys[i] from Positions[i] with
// States[i] (nil: the empty object).
type Rewinds struct {
	Keys      []string
	Positions []int64
	States    []json.RawMessage
}

var (
	// AddWorks is partition.Store.AddWorksTx of kind in schema (""
	// for the default) on tx.
	AddWorks func(ctx context.Context, tx Tx, schema, kind string, w Work) error
	// Rewind is partition.Store.RewindTx of kind in schema on tx; it
	// returns the new generation of each partition, by key.
	Rewind func(ctx context.Context, tx Tx, schema, kind string, rw Rewinds) (map[string]int64, error)
)

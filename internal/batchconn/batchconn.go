// Package batchconn lets baton's own tests outside package distributor
// build a batch by hand whose Exec, QueryRaw and CopyFrom reach the
// connection its transaction runs on, as a distributor's batches do.
// Package distributor sets Attach when it is initialised.
package batchconn

import "github.com/uptrace/bun"

// Attach gives batch (a *distributor.Batch) the connection conn, on which
// its Tx was begun, for its Exec, QueryRaw and CopyFrom.
var Attach func(batch any, conn bun.Conn)

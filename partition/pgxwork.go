package partition

import (
	"context"

	"github.com/batonhq/baton/internal/pgxwork"
)

// The pgx flavours of the producer statements, for baton's own code whose
// transaction is pgx's (internal/pgxwork).
func init() {
	pgxwork.AddWorks = func(ctx context.Context, tx pgxwork.Tx, schema, kind string, w pgxwork.Work) error {
		work := make([]Work, len(w.Keys))
		for i, k := range w.Keys {
			work[i] = Work{Key: k, N: w.N[i]}
		}
		return NewStore(nil, schema).Kind(kind).addWorksPgx(ctx, tx, work)
	}
	pgxwork.Rewind = func(ctx context.Context, tx pgxwork.Tx, schema, kind string, r pgxwork.Rewinds) (map[string]int64, error) {
		rw := make([]Rewind, len(r.Keys))
		for i, k := range r.Keys {
			rw[i] = Rewind{Key: k, Position: r.Positions[i], State: r.States[i]}
		}
		out, err := NewStore(nil, schema).Kind(kind).rewindPgx(ctx, tx, rw)
		if err != nil {
			return nil, err
		}
		gens := make(map[string]int64, len(out))
		for _, o := range out {
			gens[o.Key] = o.Generation
		}
		return gens, nil
	}
}

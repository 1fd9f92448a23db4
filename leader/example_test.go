package leader_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/leader"
)

// Two processes campaign for the role of exporter. The winner writes
// under its leadership, fenced by Check in the same transaction, and
// resigns; the other one is elected with a higher token.
func Example() {
	db, done := pgtest.ExampleDB() // a database with baton's schema applied
	defer done()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE exports (token bigint, by text)`); err != nil {
		panic(err)
	}
	elector := func(id string) *leader.Elector {
		e, err := leader.New(db, leader.Config{InstanceID: id, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			panic(err)
		}
		if err := e.Start(ctx); err != nil {
			panic(err)
		}
		return e
	}
	a, b := elector("exporter-a"), elector("exporter-b")
	defer a.Stop()
	defer b.Stop()

	// docs:campaign
	l, err := a.Campaign(ctx, "export") // blocks until elected; lead until <-l.Done()
	if err != nil {
		panic(err)
	}
	fmt.Println("leader: exporter-a, token", l.Token)
	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if err := l.Check(ctx, tx); err != nil { // leader.ErrNotLeader once the role is lost
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO exports VALUES (?, ?)`, l.Token, a.InstanceID())
		return err
	})
	if err != nil {
		panic(err)
	}
	// docs:end

	next := make(chan *leader.Leadership)
	go func() {
		l, err := b.Campaign(ctx, "export") // waits while exporter-a leads
		if err != nil {
			panic(err)
		}
		next <- l
	}()
	resignCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := l.Resign(resignCtx); err != nil {
		panic(err)
	}
	l2 := <-next
	fmt.Println("leader: exporter-b, token", l2.Token, "higher:", l2.Token > l.Token)
	// Output:
	// leader: exporter-a, token 1
	// leader: exporter-b, token 3 higher: true
}

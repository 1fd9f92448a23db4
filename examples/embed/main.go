// Command embed is a complete service that embeds baton, as a team would
// write it outside baton's repository: it imports only baton's public
// packages.
//
// It keeps its own tables (orders, shipments) beside baton's schema in its
// own database, applies baton's core migrations, enqueues orders in its
// own transactions (each order is a work item of its customer's
// partition, of the service's own kind, "orders"), ships them with its own
// Processor, whose side effect outside the database is made idempotent
// with Batch.IdempotencyKey, and stops gracefully on SIGINT/SIGTERM or
// once everything is shipped.
//
// Its partitions are of kind "orders": it can share baton's schema with
// other processors (the pricing workers, say, whose partitions are named
// after contracts, perhaps "acme" too) without ever claiming, advancing or
// adding to theirs, nor they to its.
//
// It opens its database handle itself, with database/sql, as services do,
// and tells baton how that handle reaches PostgreSQL with dbconn.Wrap:
// directly, or through a transaction pooler such as PgBouncer. Through a
// pooler it sets DIRECT_DATABASE_URL to the server itself: baton then
// migrates over a direct connection of its own, LISTENs there for new
// work, and never prepares statements nor relies on session state through
// the pooler; the timeouts of baton's transactions are set in each of
// them. A DATABASE_URL that reaches a pooler without DIRECT_DATABASE_URL
// is refused with an error that says so, rather than run half-working.
//
//	DATABASE_URL=postgres://... go run ./embed
//	DATABASE_URL=postgres://...@pgbouncer:6432/... DIRECT_DATABASE_URL=postgres://...@db:5432/... go run ./embed
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx": baton listens and batches through it
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"golang.org/x/sync/errgroup"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/schema"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

// The service's own tables. An order's seq is its position in the
// customer's partition: 1, 2, 3... in the order they were placed.
const serviceSchema = `
CREATE TABLE IF NOT EXISTS orders (
    customer text NOT NULL,
    seq      bigint NOT NULL,
    item     text NOT NULL,
    cents    bigint NOT NULL,
    PRIMARY KEY (customer, seq)
);
CREATE TABLE IF NOT EXISTS shipments (
    customer        text NOT NULL,
    seq             bigint NOT NULL,
    carrier_request text NOT NULL,
    PRIMARY KEY (customer, seq)
);`

// docs:kind
// kind names the service's partitions: its producer adds work under it
// and its workers claim only partitions of it.
const kind = "orders"

// docs:end

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return errors.New("set DATABASE_URL")
	}

	// docs:setup
	cfg := distributor.Config{
		Name:       "shipper",
		Kind:       kind, // claim the service's own partitions only
		Heartbeat:  200 * time.Millisecond,
		StaleAfter: 2 * time.Second,
		UntilDone:  true, // a batch job: stop once every order is shipped
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	// Set when DATABASE_URL goes through a transaction pooler: the server
	// itself, for migrations and LISTEN.
	direct := os.Getenv("DIRECT_DATABASE_URL")

	sqldb, err := sql.Open("pgx", url)
	if err != nil {
		return err
	}
	sqldb.SetMaxOpenConns(cfg.PoolSize())
	bdb := bun.NewDB(sqldb, pgdialect.New())
	defer bdb.Close()
	// What baton must know of the handle. The limits keep a stalled
	// worker from holding row locks; a handle baton did not open gets them
	// in each of baton's transactions.
	stmt, lock, idle := cfg.ConnectionLimits()
	db, err := dbconn.Wrap(ctx, bdb, dbconn.Access{
		Pooled: direct != "", ListenURL: direct,
		StatementTimeout: stmt, LockTimeout: lock, IdleInTransactionTimeout: idle,
	})
	if err != nil {
		return err
	}

	// baton's core tables go into their own schema ("baton"); the
	// service's tables stay where they are. Migrating holds a session
	// lock, so it needs a direct connection.
	if err := migrate(ctx, db, direct); err != nil {
		return fmt.Errorf("migrating baton: %w", err)
	}
	if _, err := db.ExecContext(ctx, serviceSchema); err != nil {
		return fmt.Errorf("creating the service's tables: %w", err)
	}
	// docs:end

	// Place orders: each transaction writes the service's rows and adds
	// them to the customer's partition, of the service's kind; its workers
	// are woken at commit. The orders are placed at the same time, as
	// requests of a service are, acme's by two requests at once.
	store := partition.NewStore(db, "").Kind(kind)
	var placing errgroup.Group
	for _, o := range []struct {
		customer string
		items    []string
	}{
		{"acme", []string{"anvil", "rocket"}},
		{"acme", []string{"magnet"}},
		{"globex", []string{"hammock"}},
		{"initech", []string{"stapler", "printer"}},
	} {
		placing.Go(func() error { return placeOrders(ctx, db, store, o.customer, o.items) })
	}
	if err := placing.Wait(); err != nil {
		return err
	}

	carrier := &carrier{requests: map[string]int{}}
	d, err := distributor.New(db, &shipper{carrier: carrier}, cfg)
	if err != nil {
		return err
	}
	if err := d.Run(ctx); err != nil { // returns after a graceful hand-back
		return err
	}

	rows, err := db.QueryContext(ctx, `
		SELECT o.customer, count(*), sum(o.cents) FROM orders o
		JOIN shipments s ON s.customer = o.customer AND s.seq = o.seq
		GROUP BY o.customer ORDER BY o.customer`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var customer string
		var n, cents int64
		if err := rows.Scan(&customer, &n, &cents); err != nil {
			return err
		}
		fmt.Printf("%s: %d orders shipped, %d cents\n", customer, n, cents)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	fmt.Printf("carrier requests: %d distinct\n", len(carrier.requests))
	return nil
}

// migrate applies baton's core migrations over db, or, when db goes
// through a pooler, over a connection of its own to direct.
func migrate(ctx context.Context, db *dbconn.DB, direct string) error {
	if direct != "" {
		mdb, err := dbconn.Open(direct, dbconn.Options{ApplicationName: "shipper-migrate", MaxOpenConns: 2})
		if err != nil {
			return err
		}
		defer mdb.Close()
		db = mdb
	}
	_, err := schema.Migrate(ctx, db, schema.Config{})
	return err
}

// placeOrders appends items to customer's orders in one transaction of
// the service's own, and makes them work for the shipper in the same
// transaction. AddWork numbers the items: it returns the seqs they take,
// after every earlier order of the customer, and holds the customer's
// task row until the transaction ends, so orders placed at the same time
// for the same customer by other goroutines or processes are numbered
// after these, never the same.
func placeOrders(ctx context.Context, db *dbconn.DB, store *partition.Store, customer string, items []string) error {
	return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		r, err := store.AddWorkTx(ctx, tx, customer, int64(len(items)))
		if err != nil {
			return err
		}
		for i, item := range items {
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders (customer, seq, item, cents) VALUES (?, ?, ?, ?)`,
				customer, r.First+int64(i), item, 100*int64(len(item))); err != nil {
				return fmt.Errorf("placing order %d of %s: %w", r.First+int64(i), customer, err)
			}
		}
		return nil
	})
}

// carrier stands for an external shipping API. Requests carry an
// idempotency key, so a batch retried by another worker after a crash
// books nothing twice.
type carrier struct {
	mu       sync.Mutex
	requests map[string]int
}

func (c *carrier) book(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests[key]++
}

// shipper is the service's Processor: it ships the orders of one batch.
type shipper struct{ carrier *carrier }

func (s *shipper) Process(ctx context.Context, b *distributor.Batch) (distributor.Result, error) {
	from := b.Checkpoint.Position
	to := min(from+int64(b.Limit), b.Checkpoint.Available)
	key := b.IdempotencyKey() // the same for these items whoever ships them
	s.carrier.book(key)
	// Written through the fenced transaction: committed with the
	// checkpoint, and only while this worker owns the customer.
	if _, err := b.Tx.ExecContext(ctx, `
		INSERT INTO shipments (customer, seq, carrier_request)
		SELECT customer, seq, ? FROM orders
		WHERE customer = ? AND seq > ? AND seq <= ?`,
		key, b.Lease.Key, from, to); err != nil {
		return distributor.Result{}, fmt.Errorf("shipping orders of %s: %w", b.Lease.Key, err)
	}
	return distributor.Result{Position: to}, nil
}

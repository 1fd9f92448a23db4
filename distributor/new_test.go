package distributor_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"testing"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
)

// otherDriver is a database/sql driver that is not pgx's.
type otherDriver struct{}

func (otherDriver) Open(string) (driver.Conn, error) { return nil, errors.New("not a real driver") }

func init() { sql.Register("baton-test-other", otherDriver{}) }

func noop(context.Context, *distributor.Batch) (distributor.Result, error) {
	return distributor.Result{}, nil
}

// New refuses what cannot work, saying what to pass, and names Config
// fields (not command-line flags) in validation errors.
func TestNewRejectsWhatCannotWork(t *testing.T) {
	t.Parallel()
	sqldb, err := sql.Open("baton-test-other", "")
	if err != nil {
		t.Fatal(err)
	}
	otherBun := bun.NewDB(sqldb, pgdialect.New())
	t.Cleanup(func() { otherBun.Close() })
	// Described as pooled, it is not checked by connecting.
	other, err := dbconn.Wrap(context.Background(), otherBun, dbconn.Access{Pooled: true})
	if err != nil {
		t.Fatal(err)
	}
	good := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	for _, c := range []struct {
		name string
		db   *dbconn.DB
		p    distributor.Processor
		cfg  distributor.Config
		want string
	}{
		{"nil db", nil, distributor.ProcessorFunc(noop), distributor.Config{}, "db is nil"},
		{"nil processor", good, nil, distributor.Config{}, "Processor is nil"},
		{"driver without LISTEN", other, distributor.ProcessorFunc(noop), distributor.Config{}, "cannot LISTEN"},
		{"listen handle without LISTEN", good, distributor.ProcessorFunc(noop), distributor.Config{ListenDB: other}, "cannot LISTEN"},
		{"MaxPartitions", good, distributor.ProcessorFunc(noop), distributor.Config{MaxPartitions: -1}, "MaxPartitions must be at least 1"},
		{"Schema", good, distributor.ProcessorFunc(noop), distributor.Config{Schema: "pg_mine"}, "invalid Schema"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := distributor.New(c.db, c.p, c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New = %v, want an error containing %q", err, c.want)
			}
		})
	}
	if got := (distributor.Config{MaxPartitions: 5}).PoolSize(); got != 8 {
		t.Errorf("PoolSize with MaxPartitions 5 = %d, want 8", got)
	}
}

package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton/pricing/pricingschema"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pglocal"
	"github.com/batonhq/baton/schema"
)

// env is the database server the benchmarks run against and the tools
// built for them.
type env struct {
	cfg       config
	tmp       string // scratch directory: worker binary, CSV, logs
	server    *pglocal.Server
	external  bool
	base      *url.URL // maintenance database URL
	admin     *sql.DB
	workerBin string
	selfBin   string

	pgss       bool // pg_stat_statements is loaded
	commitTS   bool // track_commit_timestamp is on
	cpu        *pgCPU
	settings   []setting
	serverInfo string
	mu         sync.Mutex
	templates  map[string]bool
	// created holds the databases this env created on its server,
	// dropped by close.
	created sync.Map
}

type setting struct{ Name, Value string }

// serverSettings are the private server's settings beyond pglocal's, for
// the binaries in bindir ("": pglocal.BinDir()). They are recorded in the
// report with the SHOW output.
func serverSettings(bindir string) map[string]string {
	s := map[string]string{
		"track_commit_timestamp": "on",    // commit times from the database (failover)
		"max_connections":        "400",   // 4 workers × (8 + 4) plus the simulated workers' pool
		"shared_buffers":         "512MB", // the 1M-record data set and its output stay cached
		"max_wal_size":           "4GB",   // no forced checkpoint in the middle of a measurement
	}
	if hasPGSS(bindir) {
		s["shared_preload_libraries"] = "pg_stat_statements"
		s["pg_stat_statements.max"] = "10000"
		s["pg_stat_statements.track_utility"] = "on"
	}
	return s
}

// hasPGSS reports whether the pg_stat_statements library is installed next
// to the server binaries in bindir ("": pglocal.BinDir()).
func hasPGSS(bindir string) bool {
	if bindir == "" {
		var err error
		if bindir, err = pglocal.BinDir(); err != nil {
			return false
		}
	}
	out, err := exec.Command(filepath.Join(bindir, "pg_config"), "--pkglibdir").Output()
	// Without pg_config (the npm builds of 16–18 have none), next to the
	// binaries: lib/ or lib/postgresql/.
	dirs := []string{filepath.Join(filepath.Dir(bindir), "lib"), filepath.Join(filepath.Dir(bindir), "lib", "postgresql")}
	if err == nil {
		dirs = append([]string{strings.TrimSpace(string(out))}, dirs...)
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_stat_statements.so")); err == nil {
			return true
		}
	}
	return false
}

func newEnv(ctx context.Context, cfg config) (*env, error) {
	return openEnv(ctx, cfg, os.Getenv("DATABASE_URL"), "")
}

// openEnv connects to the server at raw, or when raw is empty starts a
// private one from the binaries in bindir ("": pglocal.BinDir()).
func openEnv(ctx context.Context, cfg config, raw, bindir string) (_ *env, err error) {
	tmp, err := os.MkdirTemp("", "baton-bench-")
	if err != nil {
		return nil, fmt.Errorf("creating scratch directory: %w", err)
	}
	// The server runs as the postgres user when we are root: it must be
	// able to enter the directory.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, err
	}
	e := &env{cfg: cfg, tmp: tmp, templates: map[string]bool{}}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if raw == "" {
		log.Printf("starting a private PostgreSQL in %s (durable=%v)", tmp, cfg.durable)
		e.server, err = pglocal.Start(ctx, pglocal.Options{
			Dir: filepath.Join(tmp, "pgdata"), Durable: cfg.durable, Settings: serverSettings(bindir), BinDir: bindir,
			Log: func(f string, a ...any) { log.Printf("pglocal: "+f, a...) },
		})
		if err != nil {
			return nil, fmt.Errorf("starting private PostgreSQL: %w", err)
		}
		raw = e.server.URL("postgres")
	} else {
		e.external = true
		log.Printf("using DATABASE_URL %s", dbconn.Redact(raw))
	}
	if e.base, err = url.Parse(raw); err != nil {
		return nil, fmt.Errorf("parsing database URL: %w", err)
	}
	if e.admin, err = sql.Open("pgx", raw); err != nil {
		return nil, fmt.Errorf("opening admin connection: %w", err)
	}
	e.admin.SetMaxOpenConns(8)
	if err := e.admin.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", dbconn.Redact(raw), err)
	}
	if err := e.inspect(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// inspect records the server's version and settings and what it offers.
func (e *env) inspect(ctx context.Context) error {
	if err := e.admin.QueryRowContext(ctx, `SELECT version()`).Scan(&e.serverInfo); err != nil {
		return fmt.Errorf("reading server version: %w", err)
	}
	for _, name := range []string{"server_version", "shared_buffers", "fsync", "synchronous_commit",
		"full_page_writes", "wal_level", "max_connections", "work_mem", "max_wal_size", "checkpoint_timeout",
		"effective_cache_size", "jit", "track_commit_timestamp", "shared_preload_libraries",
		"max_worker_processes", "max_parallel_workers_per_gather", "idle_in_transaction_session_timeout",
		"statement_timeout"} {
		var v string
		if err := e.admin.QueryRowContext(ctx, "SHOW "+name).Scan(&v); err != nil {
			v = "n/a (" + err.Error() + ")"
		}
		e.settings = append(e.settings, setting{name, v})
		switch {
		case name == "track_commit_timestamp":
			e.commitTS = v == "on"
		case name == "shared_preload_libraries":
			e.pgss = strings.Contains(v, "pg_stat_statements")
		}
	}
	if e.pgss {
		if _, err := e.admin.ExecContext(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
			log.Printf("pg_stat_statements is preloaded but the extension cannot be created (%v): counting statements client-side only", err)
			e.pgss = false
		}
	}
	var err error
	e.cpu, err = newPGCPU(ctx, e.admin)
	if err != nil {
		log.Printf("database CPU not measurable: %v", err)
	}
	return nil
}

// close stops the server and removes the scratch directory (unless -keep).
func (e *env) close() {
	if e.admin != nil {
		e.dropAll()
		e.admin.Close()
	}
	if e.server != nil {
		e.server.Stop(pglocal.Fast)
	}
	if e.cfg.keep {
		log.Printf("kept %s", e.tmp)
		return
	}
	os.RemoveAll(e.tmp)
}

// url returns the URL of database name on the server.
func (e *env) url(name string) string {
	u := *e.base
	u.Path = "/" + name
	return u.String()
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// createDB creates a database, from template if given (FILE_COPY: a file
// copy plus a checkpoint, much faster than WAL-logging every block of a
// large template).
func (e *env) createDB(ctx context.Context, name, template string) error {
	stmt := "CREATE DATABASE " + quoteIdent(name)
	if template != "" {
		stmt += " TEMPLATE " + quoteIdent(template) + " STRATEGY = FILE_COPY"
	}
	if _, err := e.admin.ExecContext(ctx, stmt); err != nil {
		return fmt.Errorf("creating database %s: %w", name, err)
	}
	e.created.Store(name, true)
	return nil
}

func (e *env) dropDB(ctx context.Context, name string) {
	if _, err := e.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(name)+" WITH (FORCE)"); err != nil {
		log.Printf("dropping %s: %v", name, err)
	}
	e.created.Delete(name)
}

func (e *env) dropAll() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e.created.Range(func(k, _ any) bool {
		e.dropDB(ctx, k.(string))
		return true
	})
}

// template returns a migrated template database, filled once by fill.
func (e *env) template(ctx context.Context, name string, fill func(ctx context.Context, db *bun.DB) error) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	full := "bench_tpl_" + name
	if e.templates[full] {
		return full, nil
	}
	e.dropDB(ctx, full)
	if err := e.createDB(ctx, full, ""); err != nil {
		return "", err
	}
	db, err := dbconn.Open(e.url(full), dbconn.Options{MaxOpenConns: 4})
	if err != nil {
		return "", err
	}
	defer db.Close()
	if _, err := schema.Migrate(ctx, db, schema.Config{Sets: []*schema.Set{schema.Core, pricingschema.Set}}); err != nil {
		return "", fmt.Errorf("migrating %s: %w", full, err)
	}
	if fill != nil {
		if err := fill(ctx, db.DB); err != nil {
			return "", fmt.Errorf("filling template %s: %w", full, err)
		}
	}
	if _, err := db.ExecContext(ctx, "VACUUM ANALYZE"); err != nil {
		return "", fmt.Errorf("analyzing %s: %w", full, err)
	}
	e.templates[full] = true
	return full, nil
}

// fresh clones template into a new database and opens it.
func (e *env) fresh(ctx context.Context, template, label string) (string, *bun.DB, error) {
	name := "bench_" + label + "_" + randomSuffix()
	if err := e.createDB(ctx, name, template); err != nil {
		return "", nil, err
	}
	db, err := dbconn.Open(e.url(name), dbconn.Options{MaxOpenConns: 8})
	if err != nil {
		return "", nil, err
	}
	return name, db.DB, nil
}

// checkpoint flushes dirty buffers so that a measurement does not pay for
// the previous one's writes.
func (e *env) checkpoint(ctx context.Context) {
	if _, err := e.admin.ExecContext(ctx, "CHECKPOINT"); err != nil {
		log.Printf("checkpoint: %v", err)
	}
}

// commitTime is the SQL expression for when the transaction that wrote a
// priced row committed: its commit timestamp when the server tracks them,
// else priced_at (transaction start, earlier by the batch's duration).
func (e *env) commitTime() string {
	if e.commitTS {
		return "pg_xact_commit_timestamp(xmin)"
	}
	return "priced_at"
}

// dbClockOffset estimates database clock − local clock.
func dbClockOffset(ctx context.Context, db bun.IDB) (time.Duration, error) {
	best := time.Duration(1<<62 - 1)
	var offset time.Duration
	for range 5 {
		t0 := time.Now()
		var ts time.Time
		if err := db.QueryRowContext(ctx, `SELECT clock_timestamp()`).Scan(&ts); err != nil {
			return 0, fmt.Errorf("reading the database clock: %w", err)
		}
		rtt := time.Since(t0)
		if rtt < best {
			best = rtt
			offset = ts.Sub(t0.Add(rtt / 2))
		}
	}
	return offset, nil
}

var errNoPGSS = errors.New("pg_stat_statements is not available")

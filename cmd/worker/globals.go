package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/dbconn"
	"github.com/batonhq/baton/schema"
)

// globals are the flags every command shares.
type globals struct {
	databaseURL string
	logFormat   string
	logLevel    string
	logger      *slog.Logger
	stderr      io.Writer
	stdout      io.Writer
}

func (g *globals) register(root *cobra.Command) {
	f := root.PersistentFlags()
	f.StringVar(&g.databaseURL, "database-url", "", "PostgreSQL URL (default $DATABASE_URL)")
	f.StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
}

func (g *globals) setup(cmd *cobra.Command) error {
	g.stdout, g.stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
	if g.databaseURL == "" {
		g.databaseURL = os.Getenv("DATABASE_URL")
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return usageError("--log-level %q: want debug, info, warn or error", g.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(g.logFormat) {
	case "text":
		g.logger = slog.New(slog.NewTextHandler(g.stderr, opts))
	case "json":
		g.logger = slog.New(slog.NewJSONHandler(g.stderr, opts))
	default:
		return usageError("--log-format %q: want text or json", g.logFormat)
	}
	slog.SetDefault(g.logger)
	return nil
}

var errNoDatabase = errors.New("no database: set DATABASE_URL or pass --database-url")

// open connects to the database and, unless migrating, refuses a schema
// that does not match this binary.
func (g *globals) open(ctx context.Context, opts dbconn.Options, checkSchema bool) (*bun.DB, error) {
	if g.databaseURL == "" {
		return nil, &exitError{exitUsage, errNoDatabase}
	}
	db, err := dbconn.Open(g.databaseURL, opts)
	if err != nil {
		return nil, &exitError{exitUsage, err}
	}
	if err := dbconn.Ping(ctx, db, g.databaseURL); err != nil {
		db.Close()
		return nil, err
	}
	if checkSchema {
		if err := schema.Check(ctx, db); err != nil {
			db.Close()
			return nil, fmt.Errorf("checking schema of %s: %w", dbconn.Redact(g.databaseURL), err)
		}
	}
	return db, nil
}

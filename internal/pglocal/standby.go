package pglocal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// StartStandby makes a streaming standby of s in dir with pg_basebackup -R
// (which writes standby.signal and primary_conninfo) and starts it on a
// new free port with opts' settings. Whether it is synchronous is the
// primary's synchronous_standby_names; a standby reports
// application_name "walreceiver" unless cluster_name is set. Without a
// pg_basebackup beside the server's binaries the error wraps ErrNoTool.
func (s *Server) StartStandby(ctx context.Context, dir string, opts Options) (*Server, error) {
	basebackup, err := s.Tool("pg_basebackup")
	if err != nil {
		return nil, fmt.Errorf("making a standby: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating standby directory: %w", err)
	}
	if err := s.chown(dir); err != nil {
		return nil, err
	}
	cmd := s.command(ctx, filepath.Base(basebackup), "-D", dir, "-R", "-X", "stream", "--checkpoint=fast",
		"-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", "postgres", "--no-sync")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pg_basebackup of 127.0.0.1:%d into %s: %w\n%s", s.port, dir, err, out)
	}
	opts.Dir = dir
	if opts.BinDir == "" {
		opts.BinDir = s.bindir
	}
	return Start(ctx, opts)
}

// Promote turns a standby into a primary (pg_ctl promote) and waits until
// it accepts writes.
func (s *Server) Promote(ctx context.Context) error {
	cmd := s.command(ctx, "pg_ctl", "promote", "-w", "-D", s.opts.Dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl promote %s: %w\n%s", s.opts.Dir, err, out)
	}
	return nil
}

package main

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// stmtKind is one kind of statement, summed over pg_stat_statements
// entries (which normalise constants, so each statement shape is one
// entry).
type stmtKind struct {
	Kind    string  `json:"kind"`
	Calls   int64   `json:"calls"`
	TotalMs float64 `json:"total_ms"`
	Rows    int64   `json:"rows"`
	Example string  `json:"example,omitempty"`
}

func (s stmtKind) MeanMs() float64 {
	if s.Calls == 0 {
		return 0
	}
	return s.TotalMs / float64(s.Calls)
}

// schemaQualifier matches the schema prefix of baton's table names.
var schemaQualifier = regexp.MustCompile(`("[^"]+"|\bbaton)\.`)

// classify names the protocol statement a query text is.
func classify(q string) string {
	q = schemaQualifier.ReplaceAllString(q, "") // the schema does not tell statements apart
	has := func(subs ...string) bool {
		for _, s := range subs {
			if !strings.Contains(q, s) {
				return false
			}
		}
		return true
	}
	upper := strings.ToUpper(strings.TrimSpace(q))
	switch {
	case has("INSERT INTO workers", "expires_at = EXCLUDED.expires_at"): // claims register their owner too
		return "heartbeat"
	case has("SELECT partition_key, version, owner IS NOT NULL"):
		return "claim scan (Candidates)"
	case has("FOR UPDATE OF t SKIP LOCKED", "owner ="):
		return "claim (CAS)"
	case has("RETURNING t.partition_key, t.available > t.position"):
		return "release"
	case has("min(n)", "FROM workers"), has("FROM live"):
		return "cluster load (fair share)"
	case has("FOR KEY SHARE"):
		return "fence"
	case has("UPDATE tasks", "SET position ="):
		return "advance checkpoint"
	case has("FROM records") && has("seq >"), has("FROM record_chunks", "first_seq <="):
		return "read records"
	case has("INSERT INTO priced"), strings.HasPrefix(upper, "COPY") && has("priced"): // pgx's CopyFrom: copy "baton"."priced" (…) from stdin binary
		return "write priced"
	case has("FROM tiers"):
		return "read tiers"
	case has("pg_notify"):
		return "notify"
	case strings.HasPrefix(upper, "LISTEN"):
		return "listen"
	case has("stopped_at = now()") || has("DELETE FROM workers"):
		return "stop worker"
	case upper == "BEGIN" || strings.HasPrefix(upper, "BEGIN "):
		return "begin"
	case upper == "COMMIT":
		return "commit"
	case upper == "ROLLBACK":
		return "rollback"
	case strings.HasPrefix(upper, "DEALLOCATE"):
		return "deallocate"
	case has("peer_queue"):
		return "peer queue"
	case has("advisory"):
		return "advisory lock"
	default:
		return "other"
	}
}

// resetStatements clears pg_stat_statements.
func (e *env) resetStatements(ctx context.Context) error {
	if !e.pgss {
		return errNoPGSS
	}
	if _, err := e.admin.ExecContext(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		return fmt.Errorf("resetting pg_stat_statements: %w", err)
	}
	return nil
}

// statements reads pg_stat_statements for database dbname, by kind,
// busiest first.
func (e *env) statements(ctx context.Context, dbname string) ([]stmtKind, error) {
	if !e.pgss {
		return nil, errNoPGSS
	}
	rows, err := e.admin.QueryContext(ctx, `
		SELECT s.query, s.calls, s.total_exec_time, s.rows
		FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
		WHERE d.datname = $1`, dbname)
	if err != nil {
		return nil, fmt.Errorf("reading pg_stat_statements: %w", err)
	}
	defer rows.Close()
	byKind := map[string]*stmtKind{}
	for rows.Next() {
		var q string
		var calls, n int64
		var total float64
		if err := rows.Scan(&q, &calls, &total, &n); err != nil {
			return nil, fmt.Errorf("reading pg_stat_statements: %w", err)
		}
		k := classify(q)
		s := byKind[k]
		if s == nil {
			s = &stmtKind{Kind: k, Example: oneLine(q, 140)}
			byKind[k] = s
		}
		s.Calls += calls
		s.TotalMs += total
		s.Rows += n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading pg_stat_statements: %w", err)
	}
	out := make([]stmtKind, 0, len(byKind))
	for _, s := range byKind {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TotalMs > out[j].TotalMs })
	return out, nil
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

func findKind(ks []stmtKind, kind string) stmtKind {
	for _, k := range ks {
		if k.Kind == kind {
			return k
		}
	}
	return stmtKind{Kind: kind}
}

func totalCalls(ks []stmtKind) int64 {
	var n int64
	for _, k := range ks {
		n += k.Calls
	}
	return n
}

// Package leaserow renews and re-reads leases held on rows of a table that
// follows the task row's ownership protocol: a text key, a version bumped by
// every change of ownership, an owner, heartbeat_at and lease_expires_at on
// the database clock. It adapts such a table to heartbeat.Renewer, so
// scheduled jobs and leaderships are renewed by the same heartbeat service
// as partitions.
package leaserow

import (
	"context"
	"fmt"
	"github.com/batonhq/baton/internal/leaseinfo"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/batonhq/baton/partition"
)

// Table is one owner's view of a lease table. Table, Key and Extra are
// constants of the calling package, never input.
type Table struct {
	DB    bun.IDB
	Table string // schema-qualified table name, e.g. "baton".jobs
	Key   string // key column
	// Extra is an additional condition (on alias t) a row must meet to be
	// renewed, e.g. a run deadline; empty for none.
	Extra string
	Owner string
	TTL   time.Duration
}

func interval(d time.Duration) string { return fmt.Sprintf("%d microseconds", d.Microseconds()) }

func split(leases []partition.Lease) (keys []string, versions []int64) {
	keys = make([]string, len(leases))
	versions = make([]int64, len(leases))
	for i, l := range leases {
		keys[i], versions[i] = l.Key, l.Version
	}
	return keys, versions
}

func (t *Table) cond() string {
	if t.Extra == "" {
		return ""
	}
	return " AND (" + t.Extra + ")"
}

// Renew extends every lease still held by Owner (key, version and owner
// match, and Extra holds) to now() + TTL, in one statement, locking rows in
// key order FOR NO KEY UPDATE (which does not wait for a fenced run). It
// returns the leases renewed; a lease missing from the result is lost.
func (t *Table) Renew(ctx context.Context, leases []partition.Lease) ([]leaseinfo.Renewal, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	keys, versions := split(leases)
	rows, err := t.DB.QueryContext(ctx, `
		WITH l AS (
			SELECT t.`+t.Key+` AS key
			FROM `+t.Table+` t
			JOIN unnest(?::text[], ?::bigint[]) AS h(key, version)
			  ON t.`+t.Key+` = h.key AND t.version = h.version
			WHERE t.owner = ?`+t.cond()+`
			ORDER BY t.`+t.Key+`
			FOR NO KEY UPDATE OF t
		)
		UPDATE `+t.Table+` t
		SET heartbeat_at = now(), lease_expires_at = now() + ?::interval
		FROM l
		WHERE t.`+t.Key+` = l.key
		RETURNING t.`+t.Key+`, t.version`,
		pgdialect.Array(keys), pgdialect.Array(versions), t.Owner, interval(t.TTL))
	if err != nil {
		return nil, fmt.Errorf("renewing %d %s leases: %w", len(leases), t.Table, err)
	}
	defer rows.Close()
	out := make([]leaseinfo.Renewal, 0, len(leases))
	for rows.Next() {
		var r leaseinfo.Renewal
		if err := rows.Scan(&r.Key, &r.Version); err != nil {
			return nil, fmt.Errorf("renewing %s leases: %w", t.Table, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("renewing %s leases: %w", t.Table, err)
	}
	return out, nil
}

// Inspect re-reads leases without changing them, returning those still held
// by Owner with their remaining time on the database clock.
func (t *Table) Inspect(ctx context.Context, leases []partition.Lease) ([]leaseinfo.Owned, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	keys, versions := split(leases)
	rows, err := t.DB.QueryContext(ctx, `
		SELECT t.`+t.Key+`, t.version,
		       greatest(0, (extract(epoch FROM t.lease_expires_at - now()) * 1000000)::bigint)
		FROM `+t.Table+` t
		JOIN unnest(?::text[], ?::bigint[]) AS h(key, version)
		  ON t.`+t.Key+` = h.key AND t.version = h.version
		WHERE t.owner = ?`+t.cond(),
		pgdialect.Array(keys), pgdialect.Array(versions), t.Owner)
	if err != nil {
		return nil, fmt.Errorf("re-reading %d %s leases: %w", len(leases), t.Table, err)
	}
	defer rows.Close()
	var out []leaseinfo.Owned
	for rows.Next() {
		var h leaseinfo.Owned
		var micros int64
		if err := rows.Scan(&h.Key, &h.Version, &micros); err != nil {
			return nil, fmt.Errorf("re-reading %s leases: %w", t.Table, err)
		}
		h.Remaining = time.Duration(micros) * time.Microsecond
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("re-reading %s leases: %w", t.Table, err)
	}
	return out, nil
}

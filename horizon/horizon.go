// Package horizon reports what keeps PostgreSQL from vacuuming baton's
// tables: the oldest transactions holding back the xmin horizon, and the
// dead row versions that have piled up in the schema's tables.
//
// Every update of a row (a heartbeat renewing a lease, a checkpoint) leaves
// the old row version behind, dead. VACUUM (autovacuum) removes a dead
// version only once no transaction can still see it: once it is older than
// the xmin horizon, the oldest snapshot or transaction id any session,
// replication slot or prepared transaction still holds. One long report
// (a REPEATABLE READ transaction, or a session left "idle in transaction")
// therefore pins every dead version made after it began: the task rows
// and their index pages grow, every heartbeat and claim reads past more
// of them, and pricing slows down until the holder ends. Afterwards
// autovacuum removes them at its next pass over the table.
//
// Read takes one snapshot of the holders (pg_stat_activity: backend_xmin
// and backend_xid of every session of any database on the server but the
// reader's own and autovacuum's, which other vacuums ignore;
// pg_replication_slots: xmin and catalog_xmin; pg_prepared_xacts) and of
// pg_stat_user_tables for the schema's tables. Sessions of other roles show
// only their pid and xids unless the reading role is a member of
// pg_read_all_stats; Report.Hidden counts them. A holder's query is
// reported by its first characters only, with every literal and comment
// taken out (Query), so that a password in a statement never shows.
package horizon

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/schema"
)

// WarnAfterDefault is the age of the oldest transaction holding the
// horizon back past which a Report warns.
const WarnAfterDefault = 10 * time.Minute

// QueryChars is how many characters of a holder's query are reported.
const QueryChars = 60

// MaxHolders is how many holders a Report lists (the oldest).
const MaxHolders = 10

// Kinds of holders.
const (
	KindSession  = "session"          // a backend's snapshot or transaction id
	KindSlot     = "replication_slot" // a replication slot's xmin or catalog_xmin
	KindPrepared = "prepared"         // a prepared (two-phase) transaction
)

// Holder is one session, replication slot or prepared transaction holding
// back the xmin horizon.
type Holder struct {
	Kind     string `json:"kind"`
	PID      int    `json:"pid,omitempty"`      // sessions; a slot's active_pid
	Database string `json:"database,omitempty"` // its database (sessions, logical slots, prepared)
	User     string `json:"user,omitempty"`
	// ApplicationName is the session's application_name.
	ApplicationName string `json:"application_name,omitempty"`
	// State is pg_stat_activity's state of a session ("idle in
	// transaction", "active", ...); for a slot "active" or "inactive".
	State string `json:"state,omitempty"`
	// Name is a slot's name or a prepared transaction's gid.
	Name string `json:"name,omitempty"`
	// Since is when its transaction started (a prepared transaction: when
	// it was prepared); nil when PostgreSQL does not say (slots, a
	// walsender's feedback).
	Since *time.Time `json:"since,omitempty"`
	// Age is how long ago Since was, by the database clock; 0 when Since
	// is nil.
	Age time.Duration `json:"-"`
	// XIDAge is how many transaction ids ago its horizon lies (age() of
	// its xmin or xid, whichever is older): how far it holds vacuum back.
	XIDAge int64 `json:"xid_age"`
	// Query is the first QueryChars characters of its current or last
	// statement, literals and comments replaced by "…" (see Query).
	Query string `json:"query,omitempty"`
}

// Describe says who the holder is, in one line without secrets.
func (h Holder) Describe() string {
	var b strings.Builder
	switch h.Kind {
	case KindSlot:
		fmt.Fprintf(&b, "replication slot %s (%s", h.Name, h.State)
		if h.PID != 0 {
			fmt.Fprintf(&b, ", pid %d", h.PID)
		}
		b.WriteString(")")
	case KindPrepared:
		fmt.Fprintf(&b, "prepared transaction %q", h.Name)
		if h.User != "" {
			fmt.Fprintf(&b, " of %s", h.User)
		}
	default:
		fmt.Fprintf(&b, "pid %d", h.PID)
		if h.ApplicationName != "" {
			fmt.Fprintf(&b, " application %q", h.ApplicationName)
		}
		if h.User != "" {
			fmt.Fprintf(&b, " user %s", h.User)
		}
		if h.State != "" {
			fmt.Fprintf(&b, " %s", h.State)
		}
	}
	if h.Database != "" {
		fmt.Fprintf(&b, " in database %s", h.Database)
	}
	if h.Query != "" {
		fmt.Fprintf(&b, ": %s", h.Query)
	}
	return b.String()
}

// Table is one of the schema's tables with its row version counts, as the
// statistics collector last saw them.
type Table struct {
	Name string `json:"table"`
	Live int64  `json:"live_rows"`
	Dead int64  `json:"dead_rows"`
	// LastVacuum is the later of its last manual and automatic vacuum.
	LastVacuum *time.Time `json:"last_vacuum"`
}

// Report is one reading.
type Report struct {
	// Holders are the oldest holders of the horizon, at most MaxHolders:
	// those with a known age first, oldest first, then by XIDAge.
	Holders []Holder
	// Hidden is how many sessions of other roles hold back the horizon
	// whose details the reading role may not see (grant it
	// pg_read_all_stats to see them).
	Hidden int
	// Tables are the schema's tables, most dead row versions first.
	Tables []Table
	// WarnAfter is the threshold the report was read with.
	WarnAfter time.Duration
	// Warning is set when the oldest holder's age is at least WarnAfter,
	// or an inactive replication slot holds the horizon (a standby or
	// consumer that went away: its xmin stays until the slot is dropped).
	Warning bool
	// Reason says why Warning is set, in one line.
	Reason string
}

// Oldest is the holder of the horizon with the greatest age, nil when
// nothing holds it back.
func (r Report) Oldest() *Holder {
	if len(r.Holders) == 0 {
		return nil
	}
	return &r.Holders[0]
}

// OldestAge is the oldest holder's age (0 when none, or unknown).
func (r Report) OldestAge() time.Duration {
	if o := r.Oldest(); o != nil {
		return o.Age
	}
	return 0
}

// DeadRows is the sum of the tables' dead row versions.
func (r Report) DeadRows() int64 {
	var n int64
	for _, t := range r.Tables {
		n += t.Dead
	}
	return n
}

const holdersSQL = `
SELECT 'session', a.pid, coalesce(a.datname, ''), coalesce(a.usename, ''), coalesce(a.application_name, ''),
       coalesce(a.state, ''), '', a.xact_start,
       coalesce(extract(epoch FROM now() - a.xact_start), 0)::float8,
       coalesce(greatest(age(a.backend_xmin), age(a.backend_xid)), 0)::bigint,
       coalesce(a.query, ''), a.query = '<insufficient privilege>'
  FROM pg_stat_activity a
 WHERE (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
   AND a.pid <> pg_backend_pid()
   AND a.backend_type IS DISTINCT FROM 'autovacuum worker'
UNION ALL
SELECT 'replication_slot', coalesce(s.active_pid, 0), coalesce(s.database, ''), '', '',
       CASE WHEN s.active THEN 'active' ELSE 'inactive' END, s.slot_name::text, NULL::timestamptz, 0::float8,
       coalesce(greatest(age(s.xmin), age(s.catalog_xmin)), 0)::bigint, '', false
  FROM pg_replication_slots s
 WHERE s.xmin IS NOT NULL OR s.catalog_xmin IS NOT NULL
UNION ALL
SELECT 'prepared', 0, coalesce(p.database::text, ''), coalesce(p.owner::text, ''), '', '', p.gid, p.prepared,
       coalesce(extract(epoch FROM now() - p.prepared), 0)::float8, age(p.transaction)::bigint, '', false
  FROM pg_prepared_xacts p`

const tablesSQL = `
SELECT relname::text, n_live_tup, n_dead_tup, greatest(last_vacuum, last_autovacuum)
  FROM pg_stat_user_tables
 WHERE schemaname = ?
 ORDER BY n_dead_tup DESC, relname`

// Reader reads the horizon's holders over one database handle, and the
// dead row versions of the tables of one schema.
type Reader struct {
	db     *dbconn.DB
	schema string
}

// NewReader returns a Reader over db for the tables in schemaName
// (schema.Default, "baton", when empty).
func NewReader(db *dbconn.DB, schemaName string) *Reader {
	return &Reader{db: db, schema: cmp.Or(schemaName, schema.Default)}
}

// Read reads the holders of the horizon and the dead row versions of the
// reader's tables, and warns past warnAfter (WarnAfterDefault when 0; a
// negative value warns always).
func (hr *Reader) Read(ctx context.Context, warnAfter time.Duration) (Report, error) {
	db, schemaName := hr.db, hr.schema
	r := Report{WarnAfter: cmp.Or(warnAfter, WarnAfterDefault)}
	rows, err := db.QueryContext(ctx, holdersSQL)
	if err != nil {
		return r, fmt.Errorf("reading what holds back the xmin horizon: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var h Holder
		var since *time.Time
		var secs float64
		var query string
		var hidden bool
		if err := rows.Scan(&h.Kind, &h.PID, &h.Database, &h.User, &h.ApplicationName, &h.State, &h.Name,
			&since, &secs, &h.XIDAge, &query, &hidden); err != nil {
			return r, fmt.Errorf("reading what holds back the xmin horizon: %w", err)
		}
		if hidden {
			r.Hidden++
			query = ""
		}
		h.Since, h.Age, h.Query = since, time.Duration(secs*float64(time.Second)), Query(query, QueryChars)
		r.Holders = append(r.Holders, h)
	}
	if err := rows.Err(); err != nil {
		return r, fmt.Errorf("reading what holds back the xmin horizon: %w", err)
	}
	rows.Close()
	slices.SortStableFunc(r.Holders, func(a, b Holder) int {
		if c := cmp.Compare(b.Age, a.Age); c != 0 {
			return c
		}
		return cmp.Compare(b.XIDAge, a.XIDAge)
	})
	for _, h := range r.Holders {
		if h.Kind == KindSlot && h.State == "inactive" {
			r.Warning, r.Reason = true, fmt.Sprintf("inactive replication slot %s holds the xmin horizon %d transactions back", h.Name, h.XIDAge)
			break
		}
	}
	if o := r.Oldest(); o != nil && o.Since != nil && o.Age >= r.WarnAfter {
		r.Warning, r.Reason = true, fmt.Sprintf("a transaction open for %s holds back the xmin horizon (warning after %s): %s",
			o.Age.Round(time.Second), r.WarnAfter, o.Describe())
	}
	r.Holders = r.Holders[:min(len(r.Holders), MaxHolders)]

	trows, err := db.QueryContext(ctx, tablesSQL, schemaName)
	if err != nil {
		return r, fmt.Errorf("reading the dead row versions of schema %s: %w", schemaName, err)
	}
	defer trows.Close()
	for trows.Next() {
		var t Table
		if err := trows.Scan(&t.Name, &t.Live, &t.Dead, &t.LastVacuum); err != nil {
			return r, fmt.Errorf("reading the dead row versions of schema %s: %w", schemaName, err)
		}
		r.Tables = append(r.Tables, t)
	}
	if err := trows.Err(); err != nil {
		return r, fmt.Errorf("reading the dead row versions of schema %s: %w", schemaName, err)
	}
	return r, nil
}

// Query returns the first n characters (runes) of an SQL statement with
// its whitespace collapsed and every string literal ('…', E'…', $tag$…$tag$),
// quoted identifier and comment replaced by "…", so that nothing a
// statement carries as data (a password in ALTER ROLE, a connection string)
// is shown. A literal left open (pg_stat_activity cuts long statements)
// hides everything after its start.
func Query(q string, n int) string {
	var b strings.Builder
	space := false
	emit := func(s string) {
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteString(s)
	}
	r := []rune(q)
	for i := 0; i < len(r); i++ {
		c := r[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			space = true
		case c == '\'' || ((c == 'E' || c == 'e') && i+1 < len(r) && r[i+1] == '\'' && (i == 0 || !isIdent(r[i-1]))):
			backslash := c != '\''
			if backslash {
				i++
			}
			i = skipQuoted(r, i, '\'', backslash)
			emit("'…'")
		case c == '"':
			i = skipQuoted(r, i, '"', false)
			emit(`"…"`)
		case c == '-' && i+1 < len(r) && r[i+1] == '-':
			for i < len(r) && r[i] != '\n' {
				i++
			}
			space = true
		case c == '/' && i+1 < len(r) && r[i+1] == '*':
			end := strings.Index(string(r[i+2:]), "*/")
			if end < 0 {
				i = len(r)
			} else {
				i += 2 + len([]rune(string(r[i+2:])[:end])) + 1
			}
			space = true
		case c == '$' && (i == 0 || !isIdent(r[i-1])):
			tag, ok := dollarTag(r, i)
			if !ok {
				emit("$")
				continue
			}
			rest := string(r[i+len(tag):])
			end := strings.Index(rest, string(tag))
			if end < 0 {
				i = len(r)
			} else {
				i += len(tag) + len([]rune(rest[:end])) + len(tag) - 1
			}
			emit("$…$")
		default:
			if space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = false
			b.WriteRune(c)
		}
	}
	out := []rune(b.String())
	if len(out) > n {
		return string(out[:max(n-1, 0)]) + "…"
	}
	return string(out)
}

func isIdent(c rune) bool {
	return c == '_' || c == '$' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c > 127
}

// skipQuoted returns the index of the quote that closes the quoted text
// opening at r[i] (doubled quotes, and with backslash escapes, do not
// close it), or the end of r.
func skipQuoted(r []rune, i int, quote rune, backslash bool) int {
	for i++; i < len(r); i++ {
		switch {
		case backslash && r[i] == '\\':
			i++
		case r[i] == quote && i+1 < len(r) && r[i+1] == quote:
			i++
		case r[i] == quote:
			return i
		}
	}
	return len(r)
}

// dollarTag reads a dollar-quote tag ($$ or $name$) starting at r[i].
func dollarTag(r []rune, i int) ([]rune, bool) {
	for j := i + 1; j < len(r); j++ {
		switch {
		case r[j] == '$':
			return r[i : j+1], true
		case r[j] == '_' || (r[j] >= 'a' && r[j] <= 'z') || (r[j] >= 'A' && r[j] <= 'Z') || r[j] > 127 ||
			(j > i+1 && r[j] >= '0' && r[j] <= '9'):
		default:
			return nil, false
		}
	}
	return nil, false
}

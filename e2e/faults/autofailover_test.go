package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/pricing/pricingschema"

	"github.com/jackc/pgx/v5"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/pglocal"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/pricing/seed"
	"github.com/batonhq/baton/schema"
)

// pafCluster is a pg_auto_failover formation on this machine: a monitor, and
// nodes that pg_autoctl keepers run and the monitor fails over, on loopback
// ports in a temporary directory. As root, pg_autoctl and PostgreSQL run as
// the postgres user, like the suite's own servers.
type pafCluster struct {
	t       *testing.T
	bin     string // pg_autoctl
	bindir  string // PostgreSQL's binaries
	base    string
	cred    *syscall.Credential
	env     []string
	monitor *pafNode
	nodes   []*pafNode
}

// pafNode is the monitor or a Postgres node, and the pg_autoctl process
// running it.
type pafNode struct {
	name string
	dir  string
	port int
	proc *pafProc
}

type pafProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  string
}

// findPgAutoctl returns pg_autoctl and PostgreSQL's binaries, or why they
// cannot be used.
func findPgAutoctl() (bin, bindir string, err error) {
	bindir, err = pglocal.BinDir()
	if err != nil {
		return "", "", err
	}
	bin, err = exec.LookPath("pg_autoctl")
	if err != nil {
		bin = filepath.Join(bindir, "pg_autoctl")
		if _, serr := os.Stat(bin); serr != nil {
			return "", "", errors.New("pg_autoctl not found in $PATH or " + bindir)
		}
	}
	out, err := exec.Command(filepath.Join(bindir, "pg_config"), "--sharedir").Output()
	if err != nil {
		return "", "", fmt.Errorf("pg_config --sharedir: %w", err)
	}
	control := filepath.Join(strings.TrimSpace(string(out)), "extension", "pgautofailover.control")
	if _, err := os.Stat(control); err != nil {
		return "", "", fmt.Errorf("the pgautofailover extension is not installed (%s)", control)
	}
	return bin, bindir, nil
}

// startPAFCluster starts a monitor and a formation of a primary (node1)
// and standbys standbys (node2, ...), and waits until the primary is
// "primary" and every standby "secondary". pg_auto_failover's replication
// settings stay its defaults: number_sync_standbys 0, every standby in the
// replication quorum. Settings go to the primary's postgresql.conf before
// it first runs (the standbys' copies of its data directory have them).
func startPAFCluster(t *testing.T, standbys int, settings ...string) *pafCluster {
	t.Helper()
	bin, bindir, err := findPgAutoctl()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pg_auto_failover is required in CI: %v", err)
		}
		major := filepath.Base(filepath.Dir(bindir))
		t.Skipf("needs pg_auto_failover (%v): apt-get install pg-auto-failover-cli postgresql-%s-auto-failover", err, major)
	}
	base, err := os.MkdirTemp("", "baton-autofailover-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &pafCluster{t: t, bin: bin, bindir: bindir, base: base}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root needs a postgres user to run pg_autoctl as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	for _, d := range []string{"pg", "sock", "xdg-config", "xdg-data", "xdg-run", "home"} {
		path := filepath.Join(base, d)
		if err := os.Mkdir(path, 0o700); err != nil {
			t.Fatal(err)
		}
		if c.cred != nil {
			if err := os.Chown(path, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// pg_autoctl reads PG* variables as defaults for its options: none of
	// the caller's may leak in. PG_REGRESS_SOCK_DIR moves the servers'
	// Unix sockets into the test's directory; they listen on 127.0.0.1.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "XDG_") && !strings.HasPrefix(kv, "HOME=") &&
			!strings.HasPrefix(kv, "PATH=") {
			c.env = append(c.env, kv)
		}
	}
	c.env = append(c.env, "PATH="+bindir+":"+os.Getenv("PATH"), "PG_CONFIG="+filepath.Join(bindir, "pg_config"),
		"PGHOST=127.0.0.1", "PG_REGRESS_SOCK_DIR="+filepath.Join(base, "sock"), "HOME="+filepath.Join(base, "home"),
		"XDG_CONFIG_HOME="+filepath.Join(base, "xdg-config"), "XDG_DATA_HOME="+filepath.Join(base, "xdg-data"),
		"XDG_RUNTIME_DIR="+filepath.Join(base, "xdg-run"), "LC_ALL=C")

	// The monitor, with health checks tightened from their defaults (5s
	// period, a node unhealthy after 20s, a primary given 30s to demote
	// itself) so that a dead primary is failed over in seconds. The nodes'
	// network-partition timeout (after which a primary cut off from the
	// monitor and its standby demotes itself) is lowered below the demote
	// timeout to match. Replication settings stay pg_auto_failover's own.
	c.monitor = &pafNode{name: "monitor", dir: filepath.Join(base, "pg", "monitor"), port: freeTCPPort(t)}
	c.monitor.proc = c.start("monitor", "create", "monitor", "--pgdata", c.monitor.dir, "--pgport", strconv.Itoa(c.monitor.port),
		"--hostname", "127.0.0.1", "--listen", "127.0.0.1", "--auth", "trust", "--no-ssl", "--run")
	testutil.Eventually(t, 2*time.Minute, "the pg_auto_failover monitor answering", func() error {
		c.checkAlive(c.monitor)
		return c.monitorQuery(func(conn *pgx.Conn) error {
			var n int
			return conn.QueryRow(t.Context(), `SELECT count(*) FROM pgautofailover.formation`).Scan(&n)
		})
	})
	c.sql(c.monitor, "pg_auto_failover",
		`ALTER SYSTEM SET pgautofailover.health_check_period = 1000`,
		`ALTER SYSTEM SET pgautofailover.health_check_timeout = 1000`,
		`ALTER SYSTEM SET pgautofailover.health_check_max_retries = 1`,
		`ALTER SYSTEM SET pgautofailover.health_check_retry_delay = 500`,
		`ALTER SYSTEM SET pgautofailover.node_considered_unhealthy_timeout = 3000`,
		`ALTER SYSTEM SET pgautofailover.primary_demote_timeout = 5000`,
		`SELECT pg_reload_conf()`)

	for i := 1; i <= 1+standbys; i++ {
		n := &pafNode{name: fmt.Sprintf("node%d", i), dir: filepath.Join(base, "pg", fmt.Sprintf("node%d", i)), port: freeTCPPort(t)}
		c.nodes = append(c.nodes, n)
		create := func() {
			c.run(3*time.Minute, "create", "postgres", "--pgdata", n.dir, "--pgport", strconv.Itoa(n.port),
				"--hostname", "127.0.0.1", "--listen", "127.0.0.1", "--name", n.name, "--auth", "trust", "--no-ssl",
				"--dbname", "baton", "--monitor", c.monitorURI())
		}
		if i == 1 {
			create()
			if len(settings) > 0 {
				c.appendConf(n, settings)
			}
		} else {
			// The standby's pg_basebackup waits for a checkpoint on the
			// primary, spread over minutes by default: ask for immediate
			// ones while it waits.
			c.checkpointing(c.nodes[0], create)
		}
		c.run(time.Minute, "config", "set", "--pgdata", n.dir, "timeout.network_partition_timeout", "3")
		n.proc = c.start(n.name, "run", "--pgdata", n.dir)
		if i == 1 {
			c.waitStates(2*time.Minute, map[string]string{"node1": "single"})
		}
	}
	want := map[string]string{"node1": "primary"}
	for _, n := range c.nodes[1:] {
		want[n.name] = "secondary"
	}
	c.checkpointing(c.nodes[0], func() { c.waitStates(3*time.Minute, want) })
	return c
}

// appendConf appends settings ("name = value") to a node's
// postgresql.conf.
func (c *pafCluster) appendConf(n *pafNode, settings []string) {
	c.t.Helper()
	f, err := os.OpenFile(filepath.Join(n.dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString("\n" + strings.Join(settings, "\n") + "\n")
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		c.t.Fatalf("adding settings to %s's postgresql.conf: %v", n.name, err)
	}
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (c *pafCluster) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true}
	cmd.Env = c.env
	cmd.Dir = c.base
	return cmd
}

// run runs a pg_autoctl command to its end and fails the test if it fails.
func (c *pafCluster) run(timeout time.Duration, args ...string) {
	c.t.Helper()
	if err := c.runErr(timeout, args...); err != nil {
		c.t.Fatal(err)
	}
}

// runErr runs a pg_autoctl command to its end.
func (c *pafCluster) runErr(timeout time.Duration, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitTimeout(timeout))
	defer cancel()
	out, err := c.command(ctx, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_autoctl %s: %v\n%s", strings.Join(args, " "), err, tail(string(out), 30))
	}
	return nil
}

// start starts a long-running pg_autoctl command in a process group of its
// own (its Postgres joins it), stopped when the test ends, and told to stop
// (SIGTERM) if this process dies.
func (c *pafCluster) start(name string, args ...string) *pafProc {
	c.t.Helper()
	p := &pafProc{done: make(chan struct{}), log: filepath.Join(c.base, name+".log")}
	f, err := os.Create(p.log)
	if err != nil {
		c.t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal is tied to the thread that forks.
		runtime.LockOSThread()
		cmd := c.command(context.Background(), args...)
		cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			f.Close()
			started <- err
			close(p.done)
			return
		}
		p.cmd = cmd
		started <- nil
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	if err := <-started; err != nil {
		c.t.Fatalf("starting pg_autoctl %s: %v", strings.Join(args, " "), err)
	}
	c.t.Cleanup(func() { p.stop() })
	return p
}

// stop ends the process group: SIGTERM (pg_autoctl stops its Postgres),
// SIGKILL if that takes over 30 seconds.
func (p *pafProc) stop() {
	if isDone(p.done) {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.kill()
	}
}

// kill SIGKILLs the whole process group: pg_autoctl's services and its
// Postgres, at once, as a machine crash would.
func (p *pafProc) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

func (p *pafProc) logTail(n int) string {
	b, _ := os.ReadFile(p.log)
	return tail(string(b), n)
}

func (c *pafCluster) checkAlive(n *pafNode) {
	if isDone(n.proc.done) {
		c.t.Fatalf("pg_autoctl of %s exited: %v\n%s", n.name, n.proc.err, n.proc.logTail(30))
	}
}

func (c *pafCluster) monitorURI() string {
	return fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable", c.monitor.port)
}

func (c *pafCluster) monitorQuery(fn func(*pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.monitorURI())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return fn(conn)
}

// performFailover asks the monitor for a planned failover of the
// formation: the monitor function "pg_autoctl perform failover" calls
// before it waits for the nodes' states (the test waits for them itself).
// A busy machine can time out the connection to the monitor, so it is
// asked again until it has begun the failover: a node is given a goal
// state other than primary or secondary, or another node is primary.
func (c *pafCluster) performFailover() {
	c.t.Helper()
	var asked error
	primary := ""
	testutil.Eventually(c.t, 2*time.Minute, "the monitor beginning the planned failover", func() error {
		states, err := c.states()
		if err != nil {
			return fmt.Errorf("reading node states: %w (asking: %v)", err, asked)
		}
		for name, st := range states {
			switch goal := st[1]; {
			case goal == "primary" && primary == "":
				primary = name
			case goal == "primary" && name != primary:
				return nil // over already
			case goal != "primary" && goal != "secondary":
				return nil
			}
		}
		asked = c.monitorQuery(func(conn *pgx.Conn) error {
			_, err := conn.Exec(context.Background(), `SELECT pgautofailover.perform_failover('default', 0)`)
			return err
		})
		return fmt.Errorf("states %v (asking: %v)", states, asked)
	})
}

// url is a URL of database db on the node, as the postgres superuser.
func (n *pafNode) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", n.port, db)
}

// sql runs statements on a node as the superuser.
func (c *pafCluster) sql(n *pafNode, db string, stmts ...string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, n.url(db))
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			c.t.Fatalf("%s on %s: %v", s, n.name, err)
		}
	}
}

// checkpointing runs fn while asking the node for an immediate checkpoint
// every half second.
func (c *pafCluster) checkpointing(n *pafNode, fn func()) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if conn, err := pgx.Connect(ctx, n.url("postgres")); err == nil {
				_, _ = conn.Exec(ctx, "CHECKPOINT")
				conn.Close(context.Background())
			}
			cancel()
		}
	}()
	defer func() { close(stop); <-done }()
	fn()
}

// states reads each node's reported and assigned state from the monitor.
func (c *pafCluster) states() (map[string][2]string, error) {
	out := map[string][2]string{}
	err := c.monitorQuery(func(conn *pgx.Conn) error {
		rows, err := conn.Query(context.Background(), `SELECT nodename, reportedstate::text, goalstate::text FROM pgautofailover.node`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name, reported, goal string
			if err := rows.Scan(&name, &reported, &goal); err != nil {
				return err
			}
			out[name] = [2]string{reported, goal}
		}
		return rows.Err()
	})
	return out, err
}

// waitStates waits until each named node has reported reaching the state
// the monitor assigned it. The monitor offers no notification a test can
// wait on: poll it.
func (c *pafCluster) waitStates(timeout time.Duration, want map[string]string) {
	c.t.Helper()
	testutil.Eventually(c.t, timeout, fmt.Sprintf("pg_auto_failover states %v", want), func() error {
		for _, n := range append([]*pafNode{c.monitor}, c.nodes...) {
			if n.proc != nil && isDone(n.proc.done) && want[n.name] != "" {
				c.t.Fatalf("pg_autoctl of %s exited: %v\n%s", n.name, n.proc.err, n.proc.logTail(30))
			}
		}
		got, err := c.states()
		if err != nil {
			return err
		}
		for name, state := range want {
			if s := got[name]; s[0] != state || s[1] != state {
				return fmt.Errorf("states (reported, assigned): %v", got)
			}
		}
		return nil
	})
}

// writable reports whether a node accepts writes from a new session, as a
// read-write target_session_attrs connection checks.
func writable(n *pafNode) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, n.url("postgres"))
	if err != nil {
		return false
	}
	defer conn.Close(context.Background())
	var ro string
	if err := conn.QueryRow(ctx, `SHOW transaction_read_only`).Scan(&ro); err != nil {
		return false
	}
	return ro == "off"
}

// replicationSettings reads what makes the primary's commits wait for the
// standby: pg_auto_failover's formation and node settings on the monitor, and
// the primary's resulting configuration.
func (c *pafCluster) replicationSettings(primary *pafNode) (string, error) {
	var syncStandbys int
	var quorum []string
	err := c.monitorQuery(func(conn *pgx.Conn) error {
		if err := conn.QueryRow(context.Background(), `SELECT number_sync_standbys FROM pgautofailover.formation
			WHERE formationid = 'default'`).Scan(&syncStandbys); err != nil {
			return err
		}
		rows, err := conn.Query(context.Background(), `SELECT nodename || '=' || replicationquorum::text FROM pgautofailover.node ORDER BY nodeid`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				return err
			}
			quorum = append(quorum, s)
		}
		return rows.Err()
	})
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, primary.url("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	var names, commit, states string
	if err := conn.QueryRow(ctx, `SELECT current_setting('synchronous_standby_names'), current_setting('synchronous_commit'),
		coalesce(string_agg(application_name || ':' || sync_state, ','), '')
		FROM pg_stat_replication WHERE state = 'streaming'`).Scan(&names, &commit, &states); err != nil {
		return "", err
	}
	desc := fmt.Sprintf("number_sync_standbys=%d, replication_quorum %s; on %s: synchronous_standby_names=%q, synchronous_commit=%s, standbys %s",
		syncStandbys, strings.Join(quorum, " "), primary.name, names, commit, states)
	if names == "" || (commit != "on" && commit != "remote_apply" && commit != "remote_write") ||
		!(strings.Contains(states, ":sync") || strings.Contains(states, ":quorum")) {
		return desc, fmt.Errorf("commits on %s do not wait for the standby: %s", primary.name, desc)
	}
	return desc, nil
}

// syncWaitsCancelledIn counts the commits the node's server logs say were
// visible locally before they were replicated (a cancelled wait for the
// synchronous standby), in every log file pg_autoctl's Postgres writes.
func syncWaitsCancelledIn(n *pafNode) int {
	files, _ := filepath.Glob(filepath.Join(n.dir, "log", "*"))
	files = append(files, filepath.Join(n.dir, "startup.log"))
	total := 0
	for _, f := range files {
		if k, err := syncWaitsCancelled(f); err == nil {
			total += k
		}
	}
	return total
}

// failoverFigures are the timings of one failover.
type failoverFigures struct {
	primary  *pafNode      // the node that took over
	writable time.Duration // fault → the new primary accepts writes
	progress time.Duration // fault → the first batch committed on it
}

// awaitFailover waits for one of the candidate nodes to accept writes after
// a fault at t0, then for the first batch committed there, and checks that
// every batch committed before the fault (before records priced, as of at)
// survived.
func (r *run) awaitFailover(c *pafCluster, candidates []*pafNode, t0 time.Time, before int64, at time.Time) failoverFigures {
	r.t.Helper()
	var f failoverFigures
	var promoted time.Time
	var names []string
	for _, n := range candidates {
		names = append(names, n.name)
	}
	testutil.Eventually(r.t, 2*time.Minute, strings.Join(names, " or ")+" accepting writes", func() error {
		for _, n := range candidates {
			if writable(n) {
				f.primary, promoted = n, time.Now()
				return nil
			}
		}
		states, _ := c.states()
		return fmt.Errorf("read-only; states %v", states)
	})
	f.writable = promoted.Sub(t0)
	// The test's pool may hold connections to the old primary.
	r.db.SetMaxIdleConns(0)
	r.db.SetMaxIdleConns(2)
	var first time.Time
	testutil.Eventually(r.t, 2*time.Minute, "a batch committed on the new primary", func() error {
		var ts *time.Time
		var done, total int64
		if err := r.db.QueryRow(`SELECT (SELECT min(priced_at) FROM baton.priced WHERE priced_at >= ?),
			(SELECT coalesce(sum(position), 0) FROM baton.tasks), (SELECT coalesce(sum(available), 0) FROM baton.tasks)`,
			promoted).Scan(&ts, &done, &total); err != nil {
			return err
		}
		if ts == nil {
			states, _ := c.states()
			return fmt.Errorf("none yet (%d of %d records priced; states %v)", done, total, states)
		}
		first = *ts
		return nil
	})
	f.progress = first.Sub(t0)
	var kept int64
	if err := r.db.QueryRow(`SELECT count(*) FROM baton.priced WHERE priced_at <= ?`, at).Scan(&kept); err != nil {
		r.t.Fatal(err)
	}
	if kept >= before {
		r.t.Logf("all %d priced records committed before the failover are on the new primary", before)
	} else {
		// As in TestPrimaryFailoverToSynchronousStandby: a commit whose
		// wait for the standby was cancelled is visible on the primary
		// unreplicated, and says so in its log; any other loss is a loss.
		cancelled := 0
		for _, n := range c.nodes {
			cancelled += syncWaitsCancelledIn(n)
		}
		if cancelled == 0 {
			r.t.Fatalf("committed batches lost in the failover: %d priced records before it, %d after", before, kept)
		}
		r.t.Logf("%d priced records before the failover, %d after: the servers' logs show %d cancelled waits for the synchronous standby",
			before, kept, cancelled)
	}
	return f
}

// haLoader keeps work waiting for the workers through the failovers: while
// fewer than backlog records are left to price, it loads a file of new
// records with "worker load" on the multi-host URL, repeating a load that
// fails (the primary changing) until it succeeds; a repeat of a load that
// did commit only re-delivers its records, which are skipped.
type haLoader struct {
	r        *run
	backlog  int64
	stop     chan struct{}
	done     chan struct{}
	loads    atomic.Int64
	err      error
	failures int
	// history is every load that succeeded, in order: which file, when,
	// after how many failed attempts, and what "worker load" said. A
	// failed run logs it beside the loads table of the surviving primary.
	history []string

	mu sync.Mutex
	// acked are the loads "worker load" acknowledged (exit 0), in order;
	// exits counts the attempts that exited otherwise, by exit code (-1:
	// no exit code).
	acked []loadAck
	exits map[int]int
	// confirm runs the loads with --confirm-standby; unconfirmed are
	// then the loads that exited 6, not repeated: committed on a primary
	// that did not wait for its standby, they may or may not survive.
	confirm     bool
	unconfirmed []string
}

// loadAck is a load acknowledged by "worker load" exiting 0.
type loadAck struct {
	path    string
	records int64
	at      time.Time
}

// ackedBefore is the loads acknowledged before t.
func (l *haLoader) ackedBefore(t time.Time) []loadAck {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []loadAck
	for _, a := range l.acked {
		if a.at.Before(t) {
			out = append(out, a)
		}
	}
	return out
}

// exitCodes describes the failed attempts by exit code.
func (l *haLoader) exitCodes() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var parts []string
	for code, n := range l.exits {
		parts = append(parts, fmt.Sprintf("exit %d: %d", code, n))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

func (r *run) startHALoader(contracts, per int, backlog int64, confirm bool) *haLoader {
	l := &haLoader{r: r, backlog: backlog, stop: make(chan struct{}), done: make(chan struct{}), exits: map[int]int{}, confirm: confirm}
	first := r.rng.Uint64()
	go func() {
		defer close(l.done)
		for n := 2; ; n++ {
			attempts := 0
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				if left, err := r.pendingNow(); err == nil && left < l.backlog {
					break
				}
				time.Sleep(100 * time.Millisecond) // a count in the database: no notification
			}
			path := filepath.Join(r.dir, fmt.Sprintf("records-%d.csv", n))
			o := seed.Options{Contracts: contracts, RecordsPerContract: per, Seed: first + uint64(n), Prefix: "f"}
			f, err := os.Create(path)
			if err == nil {
				err = writeRecordRange(f, o, func(c, j int) bool { return true }, fmt.Sprintf("l%d-", n))
				err = errors.Join(err, f.Close())
			}
			if err != nil {
				l.err = err
				return
			}
			deadline := time.Now().Add(testutil.WaitTimeout(2 * time.Minute))
			for {
				args := []string{"load", "--records", path}
				if l.confirm {
					args = append(args, "--confirm-standby")
				}
				cmd := exec.Command(workerBin, args...)
				cmd.Env = append(os.Environ(), "DATABASE_URL="+r.dsn)
				out, err := cmd.CombinedOutput()
				attempts++
				if err == nil {
					l.mu.Lock()
					l.acked = append(l.acked, loadAck{path: path, records: int64(contracts * per), at: time.Now()})
					l.mu.Unlock()
					l.history = append(l.history, fmt.Sprintf("%s committed at %s after %d attempt(s): %s",
						filepath.Base(path), time.Now().Format("15:04:05.000"), attempts, strings.TrimSpace(tail(string(out), 2))))
					break
				}
				code := -1
				if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
					code = exit.ExitCode()
				}
				l.mu.Lock()
				l.exits[code]++
				l.mu.Unlock()
				if code == clienv.ExitNotReplicated && l.confirm {
					l.unconfirmed = append(l.unconfirmed, path)
					l.history = append(l.history, fmt.Sprintf("%s committed unconfirmed at %s after %d attempt(s): %s",
						filepath.Base(path), time.Now().Format("15:04:05.000"), attempts, strings.TrimSpace(tail(string(out), 2))))
					break
				}
				l.r.t.Logf("load %s attempt %d failed at %s: %v: %s", filepath.Base(path), attempts,
					time.Now().Format("15:04:05.000"), err, strings.TrimSpace(tail(string(out), 2)))
				l.failures++
				if time.Now().After(deadline) {
					l.err = fmt.Errorf("worker load %s: %v\n%s", path, err, out)
					return
				}
				time.Sleep(200 * time.Millisecond) // back-off before the repeat
			}
			// Read by the check once the loader has ended, in load order;
			// checkUnconfirmed takes out the unconfirmed loads lost.
			r.inputs = append(r.inputs, path)
			l.loads.Add(1)
		}
	}()
	return l
}

// end stops the loader after its load in progress and fails the test if a
// load never succeeded.
func (l *haLoader) end() {
	l.r.t.Helper()
	close(l.stop)
	<-l.done
	if l.err != nil {
		l.r.t.Fatal(l.err)
	}
}

// checkUnconfirmed takes out of the check's inputs the loads that exited 6
// and are not on the surviving primary: a load is one transaction, so its
// records are there whole or not at all. Those missing were lost with a
// primary that had stopped waiting for its standby, as "worker load"
// warned.
func (l *haLoader) checkUnconfirmed() {
	r := l.r
	r.t.Helper()
	present := map[string]bool{}
	rows, err := r.db.Query(`SELECT coalesce(records_file, '') FROM baton.loads`)
	if err != nil {
		r.t.Fatal(err)
	}
	for rows.Next() {
		var f string
		if err := rows.Scan(&f); err != nil {
			r.t.Fatal(err)
		}
		present[filepath.Base(f)] = true
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		r.t.Fatal(err)
	}
	var lost []string
	for _, p := range l.unconfirmed {
		if !present[filepath.Base(p)] {
			lost = append(lost, filepath.Base(p))
			r.inputs = slices.DeleteFunc(r.inputs, func(in string) bool { return in == p })
		}
	}
	r.t.Logf("%d loads exited 6 (committed, not confirmed by the standby): %d kept, lost %v",
		len(l.unconfirmed), len(l.unconfirmed)-len(lost), lost)
}

// report logs the loads that succeeded, as the loader saw them, and the
// loads the surviving primary has: a load reported committed but absent
// there, or present with every record re-delivered, shows where records
// went missing.
func (l *haLoader) report() {
	r := l.r
	r.t.Logf("loads reported committed:\n%s", strings.Join(l.history, "\n"))
	rows, err := r.db.Query(`SELECT load_id, started_at, coalesce(records_file, ''), records_accepted, records_redelivered
		FROM baton.loads ORDER BY load_id`)
	if err != nil {
		r.t.Logf("reading the loads: %v", err)
		return
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var id, accepted, redelivered int64
		var at time.Time
		var file string
		if err := rows.Scan(&id, &at, &file, &accepted, &redelivered); err != nil {
			r.t.Logf("reading the loads: %v", err)
			return
		}
		lines = append(lines, fmt.Sprintf("load %d at %s: %s accepted %d re-delivered %d",
			id, at.UTC().Format("15:04:05.000"), filepath.Base(file), accepted, redelivered))
	}
	r.t.Logf("loads on the surviving primary:\n%s", strings.Join(lines, "\n"))
}

// pendingNow is the number of records left to price, or the error of a
// database that is changing primaries.
func (r *run) pendingNow() (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var n int64
	err := r.db.QueryRowContext(ctx, `SELECT coalesce(sum(available - position), 0) FROM baton.tasks`).Scan(&n)
	return n, err
}

// pricedNow is the number of records priced so far (checkpoints).
func (r *run) pricedNow() (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var n int64
	err := r.db.QueryRowContext(ctx, `SELECT coalesce(sum(position), 0) FROM baton.tasks`).Scan(&n)
	return n, err
}

// waitInFlight waits until at least priced records are priced and at least
// waiting more wait, so that a failover has committed batches to keep and
// finds work in flight.
func (r *run) waitInFlight(priced, waiting int64) {
	r.t.Helper()
	testutil.Eventually(r.t, 2*time.Minute, fmt.Sprintf("%d records priced and %d waiting", priced, waiting), func() error {
		done, err := r.pricedNow()
		if err != nil {
			return err
		}
		left, err := r.pendingNow()
		if err != nil {
			return err
		}
		if done < priced || left < waiting {
			return fmt.Errorf("%d priced, %d waiting", done, left)
		}
		return nil
	})
}

// Workers on a multi-host URL through a pg_auto_failover formation (monitor,
// primary, synchronous secondary) while new records keep arriving: a planned
// failover ("pg_autoctl perform failover") mid-run, then, once the old
// primary is back as a secondary, a crash of the new primary (its pg_autoctl
// and Postgres SIGKILLed) that the monitor fails over by itself. Nothing
// committed is lost, every record is priced exactly once with the exact
// amounts, and the time to progress after each failover is reported.
// Loads run with --confirm-standby: with one standby the monitor turns
// synchronous replication off whenever it finds the standby unhealthy
// (wait_primary), and a load committed then exits 6. Every load
// acknowledged with exit 0 must survive both failovers; one that exited 6
// is checked only if it did.
func TestAutoFailoverUnderHAManager(t *testing.T) {
	c := startPAFCluster(t, 1)
	primary, standby := c.nodes[0], c.nodes[1]
	repl, err := c.replicationSettings(primary)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("replication: %s", repl)

	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/baton?sslmode=disable&target_session_attrs=read-write",
		primary.port, standby.port)
	db, err := dbconn.Open(url, dbconn.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, err = schema.Migrate(t.Context(), db, schema.Config{Sets: []*schema.Set{schema.Core, pricingschema.Set}})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	r := newRunOn(t, scenarioSeed(t), url)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, w := range r.workers {
			t.Logf("worker %s log tail:\n%s", w.name, tail(w.logs(), 15))
		}
		for _, n := range append([]*pafNode{c.monitor}, c.nodes...) {
			t.Logf("pg_autoctl %s log tail:\n%s", n.name, n.proc.logTail(80))
		}
	})
	const contracts, per = 16, 500
	r.seedData(contracts, per)
	for range 3 {
		r.launch(r.dsn, "--batch-size", "20")
	}
	loader := r.startHALoader(contracts, per, 3*contracts*per, true)

	// 1. Planned failover, with batches committed and records waiting.
	r.waitInFlight(contracts*per/2, contracts*per)
	before, at := r.pricedAsOf()
	t0 := time.Now()
	c.performFailover()
	t.Logf("planned failover began at %s", t0.Format("15:04:05.000"))
	r.stats.fault("ha_planned_failover")
	planned := r.awaitFailover(c, []*pafNode{standby}, t0, before, at)
	t.Logf("planned failover: %s accepted writes %s after the failover began, first batch there %s after",
		standby.name, planned.writable.Round(time.Millisecond), planned.progress.Round(time.Millisecond))
	primary, standby = standby, primary

	// The old primary rejoins as a synchronous secondary before the crash.
	c.checkpointing(primary, func() {
		c.waitStates(3*time.Minute, map[string]string{primary.name: "primary", standby.name: "secondary"})
	})
	testutil.Eventually(t, time.Minute, "the new secondary synchronous", func() error {
		d, err := c.replicationSettings(primary)
		if err == nil {
			repl = d
		}
		return err
	})
	t.Logf("replication after the planned failover: %s", repl)

	// 2. The primary crashes, with batches committed on it and records
	// waiting.
	done, err := r.pricedNow()
	if err != nil {
		t.Fatal(err)
	}
	r.waitInFlight(done+contracts*per/2, contracts*per)
	before, at = r.pricedAsOf()
	t0 = time.Now()
	primary.proc.kill()
	t.Logf("%s killed at %s", primary.name, time.Now().Format("15:04:05.000"))
	r.stats.fault("ha_primary_killed")
	crash := r.awaitFailover(c, []*pafNode{standby}, t0, before, at)
	t.Logf("primary killed: %s accepted writes %s after the kill, first batch there %s after",
		standby.name, crash.writable.Round(time.Millisecond), crash.progress.Round(time.Millisecond))

	loader.end()
	testutil.Eventually(t, 2*time.Minute, "every record priced", func() error {
		left, err := r.pendingNow()
		if err != nil {
			return err
		}
		if left > 0 {
			return fmt.Errorf("%d left", left)
		}
		return nil
	})
	for _, w := range r.workers {
		if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	r.waitAll(time.Minute)
	if len(loader.ackedBefore(time.Now())) == 0 {
		t.Fatal("no load was acknowledged with exit 0: the check of acknowledged loads would be empty")
	}
	loader.checkUnconfirmed()
	r.check()
	if t.Failed() {
		loader.report()
	}
	t.Logf("%d loads while the workers ran (%d attempts repeated after a failure)", loader.loads.Load(), loader.failures)
	note("pg_auto_failover: planned failover: writes accepted after %s, first batch after %s; primary killed: writes accepted after %s, first batch after %s",
		planned.writable.Round(time.Millisecond), planned.progress.Round(time.Millisecond),
		crash.writable.Round(time.Millisecond), crash.progress.Round(time.Millisecond))
}

package pglocal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// ErrNoPgBouncer is returned by StartBouncer when the pgbouncer binary is
// not installed.
var ErrNoPgBouncer = errors.New(`pgbouncer not found; install it, for example:
  Debian/Ubuntu:  sudo apt-get install -y pgbouncer`)

// Bouncer is a private PgBouncer in transaction pooling mode in front of a
// Server, as most production PostgreSQL fleets run it.
type Bouncer struct {
	port int
	dir  string
	out  syncBuffer // start-up errors, before the log file is open
	cmd  *exec.Cmd
	done chan struct{}
}

// StartBouncer starts PgBouncer on a free loopback port in front of srv,
// with pool_mode = transaction and only extra_float_digits in
// ignore_startup_parameters (the common production setting): any other
// startup parameter is rejected, as in production. Its files go in a
// temporary directory removed by Stop. It runs until Stop or until this
// process exits.
func StartBouncer(ctx context.Context, srv *Server) (*Bouncer, error) {
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr != nil {
			return nil, ErrNoPgBouncer
		}
		bin = "/usr/sbin/pgbouncer"
	}
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("choosing a port for pgbouncer: %w", err)
	}
	dir, err := os.MkdirTemp("", "baton-pgbouncer-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	users := filepath.Join(dir, "users.txt")
	ini := filepath.Join(dir, "pgbouncer.ini")
	logPath := filepath.Join(dir, "pgbouncer.log")
	conf := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
ignore_startup_parameters = extra_float_digits
max_client_conn = 1000
default_pool_size = 20
server_lifetime = 3600
logfile = %s
`, srv.Port(), port, users, logPath)
	for path, text := range map[string]string{ini: conf, users: `"postgres" ""` + "\n"} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			return nil, err
		}
		if err := srv.chown(path); err != nil {
			return nil, err
		}
	}
	if err := srv.chown(dir); err != nil {
		return nil, err
	}
	b := &Bouncer{port: port, dir: dir, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// As for the server: the parent-death signal belongs to this thread.
		runtime.LockOSThread()
		cmd := exec.Command(bin, ini)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: srv.cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
		cmd.Stdout, cmd.Stderr = &b.out, &b.out
		b.cmd = cmd
		if err := cmd.Start(); err != nil {
			started <- err
			close(b.done)
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(b.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting pgbouncer: %w", err)
	}
	// Readiness: the port accepts connections (PgBouncer gives no other
	// signal to its parent).
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err == nil {
			c.Close()
			return b, nil
		}
		select {
		case <-b.done:
			log, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("pgbouncer exited during start-up:\n%s%s", b.out.String(), lastLines(string(log), 15))
		case <-ctx.Done():
			b.Stop()
			return nil, ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			b.Stop()
			return nil, fmt.Errorf("pgbouncer did not listen on port %d: %w", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Log returns the last lines of PgBouncer's log and output, for a failed
// test's report.
func (b *Bouncer) Log() string {
	log, _ := os.ReadFile(filepath.Join(b.dir, "pgbouncer.log"))
	return b.out.String() + lastLines(string(log), 30)
}

// URL returns a connection URL for database through the pooler.
func (b *Bouncer) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", b.port, database)
}

// Stop ends PgBouncer and waits for it to exit. It is idempotent.
func (b *Bouncer) Stop() {
	if b.cmd != nil && b.cmd.Process != nil {
		_ = b.cmd.Process.Signal(syscall.SIGTERM) // immediate shutdown
	}
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
	os.RemoveAll(b.dir)
}

// syncBuffer is a bytes.Buffer that the process's output copier writes
// while a failed test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Package pglocal runs a private PostgreSQL server from the binaries installed
// on this machine, for the demo, the tests and the benchmarks when no
// DATABASE_URL is given.
//
// The server listens on 127.0.0.1 only (no Unix socket), on a free port chosen
// at start, with trust authentication for the local "postgres" user. It runs
// as a child process that is told to shut down if its parent dies, so an
// aborted test run does not leave servers behind. When the current user is
// root, initdb and postgres run as the "postgres" system user, since
// PostgreSQL refuses to run as root.
package pglocal

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
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoBinaries is returned when initdb and postgres cannot be found.
var ErrNoBinaries = errors.New(`PostgreSQL server binaries (initdb, postgres) not found.
Install them, for example:
  Debian/Ubuntu:  sudo apt-get install -y postgresql
  Fedora/RHEL:    sudo dnf install -y postgresql-server
  macOS:          brew install postgresql@16
or set BATON_PG_BINDIR to the folder holding them, or set DATABASE_URL to use an existing server`)

// Options configure a private server.
type Options struct {
	// Dir is the data directory. If it holds a cluster it is reused,
	// otherwise one is created there. Required.
	Dir string
	// Durable keeps fsync and full-page writes on. Off by default: the
	// private server holds throwaway data and tests want speed. Commits
	// are synchronous either way, so an acknowledged commit survives the
	// server being killed.
	Durable bool
	// Settings are extra server settings (name → value).
	Settings map[string]string
	// Log receives progress lines; nil discards them.
	Log func(format string, args ...any)
	// BinDir is the folder with initdb and postgres; empty means BinDir()
	// (for a test that needs two majors at once).
	BinDir string
}

// Server is a running private PostgreSQL server.
type Server struct {
	opts   Options
	bindir string
	major  int // of the binaries in bindir
	cred   *syscall.Credential
	port   int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	env  []string // added to the server's environment (SetEnv)
}

// BinDir finds the folder with initdb and postgres: the one of the major
// version $BATON_PG_VERSION when it is set (see versionBinDir), else
// $BATON_PG_BINDIR (or $PG_BINDIR), then $PATH, then the newest
// /usr/lib/postgresql/*/bin, then common install locations.
func BinDir() (string, error) {
	if v := os.Getenv(EnvVersion); v != "" {
		return versionBinDir(v)
	}
	if name, d := bindirEnv(); d != "" {
		if hasServer(d) {
			return d, nil
		}
		return "", fmt.Errorf("%s=%s does not hold initdb and postgres: %w", name, d, ErrNoBinaries)
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && hasServer(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
		if hasServer(filepath.Dir(p)) {
			return filepath.Dir(p), nil
		}
	}
	versions, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(versions, func(a, b string) int { return majorOf(b) - majorOf(a) })
	candidates := append(versions, "/usr/local/pgsql/bin", "/opt/homebrew/bin", "/usr/local/bin", "/usr/pgsql/bin")
	for _, d := range candidates {
		if hasServer(d) {
			return d, nil
		}
	}
	return "", ErrNoBinaries
}

// hasServer reports whether dir holds initdb and postgres.
func hasServer(dir string) bool {
	for _, b := range []string{"initdb", "postgres"} {
		if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.IsDir() {
			return false
		}
	}
	return true
}

func majorOf(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// Start creates the cluster if needed and starts the server. The server runs
// until Stop is called or this process exits.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Dir == "" {
		return nil, errors.New("pglocal: Options.Dir is required")
	}
	if opts.Log == nil {
		opts.Log = func(string, ...any) {}
	}
	bindir := opts.BinDir
	if bindir == "" {
		var err error
		if bindir, err = BinDir(); err != nil {
			return nil, err
		}
	} else if !hasServer(bindir) {
		return nil, fmt.Errorf("%s does not hold initdb and postgres: %w", bindir, ErrNoBinaries)
	}
	major, err := BinMajor(bindir)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, bindir: bindir, major: major}
	if os.Geteuid() == 0 {
		cred, err := postgresUser()
		if err != nil {
			return nil, err
		}
		s.cred = cred
	}
	if err := s.initdb(ctx); err != nil {
		return nil, err
	}
	if err := s.Restart(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs a \"postgres\" system user to run the server as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func (s *Server) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.bindir, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd
}

func (s *Server) chown(path string) error {
	if s.cred == nil {
		return nil
	}
	return os.Chown(path, int(s.cred.Uid), int(s.cred.Gid))
}

func (s *Server) initdb(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(s.opts.Dir, "PG_VERSION")); err == nil {
		s.opts.Log("reusing PostgreSQL data directory %s", s.opts.Dir)
		return nil
	}
	if err := os.MkdirAll(s.opts.Dir, 0o700); err != nil {
		return fmt.Errorf("creating data directory: %w", err)
	}
	if err := s.chown(s.opts.Dir); err != nil {
		return fmt.Errorf("handing data directory to the postgres user: %w", err)
	}
	s.opts.Log("initialising PostgreSQL data directory %s", s.opts.Dir)
	cmd := s.command(ctx, "initdb", "-D", s.opts.Dir, "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb %s: %w\n%s", s.opts.Dir, err, out)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Restart starts the server if it is not running, on the port it had before
// (a new free port the first time). Tests use Stop+Restart to simulate a
// database restart.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	if err := checkNotInUse(s.opts.Dir); err != nil {
		return err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			// Another server may have taken the directory meanwhile:
			// that, not the failed start, is the cause to report.
			if err := checkNotInUse(s.opts.Dir); err != nil {
				return err
			}
		}
		port := s.port
		if port == 0 {
			// First start: another process may take the free port between
			// choosing and binding it, so choose again on failure.
			p, err := freePort()
			if err != nil {
				return fmt.Errorf("choosing a port: %w", err)
			}
			port = p
		} else if attempt > 0 {
			// A restart keeps its port (clients hold the URL); the old
			// socket may linger briefly.
			time.Sleep(200 * time.Millisecond)
		}
		if lastErr = s.startOn(ctx, port); lastErr == nil {
			return nil
		}
	}
	return lastErr
}

func (s *Server) startOn(ctx context.Context, port int) error {
	args := []string{"-D", s.opts.Dir, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=",
		"-c", "max_connections=300",
		"-c", "shared_buffers=128MB",
		"-c", "logging_collector=off",
		"-c", "log_min_messages=warning",
	}
	if !s.opts.Durable {
		// synchronous_commit stays on: with fsync off a commit costs one
		// write to the kernel, and a commit acknowledged is then in the
		// kernel's cache, so it survives a server killed (an immediate
		// shutdown, as the fault tests do) though not a machine crash.
		// Off, an acknowledged load could vanish in such a restart, and the
		// fault tests would report it as lost.
		args = append(args, "-c", "fsync=off", "-c", "full_page_writes=off")
	}
	keys := make([]string, 0, len(s.opts.Settings))
	for k := range s.opts.Settings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+s.opts.Settings[k])
	}
	logPath := filepath.Join(s.opts.Dir, "server.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("opening server log: %w", err)
	}
	_ = s.chown(logPath)

	// The server is started from a goroutine locked to its OS thread, which
	// stays alive waiting for it: the parent-death signal is tied to the
	// thread that started the child, not to the process.
	started := make(chan error, 1)
	done := make(chan struct{})
	var cmd *exec.Cmd
	env := s.env
	go func() {
		runtime.LockOSThread()
		cmd = s.command(context.Background(), "postgres", args...)
		cmd.Env = append(cmd.Env, env...)
		cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Start(); err != nil {
			started <- err
			close(done)
			logFile.Close()
			return
		}
		started <- nil
		_ = cmd.Wait()
		logFile.Close()
		close(done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	s.cmd, s.done = cmd, done
	prevPort := s.port
	s.port = port
	if err := s.waitReady(ctx); err != nil {
		s.stopLocked(syscall.SIGQUIT)
		s.port = prevPort
		if err := checkNotInUse(s.opts.Dir); err != nil {
			return err
		}
		tail, _ := os.ReadFile(logPath)
		return fmt.Errorf("postgres did not become ready on port %d: %w\n%s", port, err, lastLines(string(tail), 15))
	}
	s.opts.Log("PostgreSQL listening on 127.0.0.1:%d", port)
	return nil
}

// ErrInUse reports a data directory that a running server already uses.
var ErrInUse = errors.New("data directory in use")

// InUse returns the pid of a running server that holds the data directory
// dir (from its postmaster.pid), or 0.
func InUse(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	// The server writes its pid negated while it is starting or is a
	// single-user backend: either way the directory is taken.
	pid, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(first), "-"))
	if err != nil || pid <= 0 {
		return 0
	}
	// Signal 0 checks existence; EPERM means alive under another user.
	if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
		return pid
	}
	return 0
}

func checkNotInUse(dir string) error {
	if pid := InUse(dir); pid != 0 {
		return fmt.Errorf("%w: %s is used by a running PostgreSQL server (pid %d), perhaps another demo; "+
			"wait for it to finish or choose another directory", ErrInUse, dir, pid)
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitReady polls the server until it accepts a connection. Polling is the
// only readiness signal a postmaster gives its parent.
func (s *Server) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return errors.New("server exited during start-up")
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, s.URL("postgres"))
		cancel()
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		last = err
		time.Sleep(25 * time.Millisecond)
	}
	return fmt.Errorf("timed out: %w", last)
}

// Port is the TCP port the server listens on.
func (s *Server) Port() int { return s.port }

// Dir is the data directory.
func (s *Server) Dir() string { return s.opts.Dir }

// URL returns a connection URL for database on this server.
func (s *Server) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, database)
}

// Mode says how to shut the server down.
type Mode int

const (
	// Fast rolls back open transactions and exits cleanly (SIGINT).
	Fast Mode = iota
	// Immediate aborts without a clean shutdown, like a crash (SIGQUIT).
	Immediate
)

// Stop shuts the server down and waits for it to exit. It is idempotent.
func (s *Server) Stop(mode Mode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sig := syscall.SIGINT
	if mode == Immediate {
		sig = syscall.SIGQUIT
	}
	s.stopLocked(sig)
}

func (s *Server) stopLocked(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd, s.done = nil, nil
}

// Remove stops the server and deletes its data directory.
func (s *Server) Remove() error {
	s.Stop(Fast)
	return os.RemoveAll(s.opts.Dir)
}

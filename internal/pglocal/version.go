package pglocal

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// The environment that chooses the server's binaries.
const (
	// EnvVersion chooses a major version (15, 16, 17, 18): BinDir returns
	// the installed binaries of that major or fails, never another's.
	EnvVersion = "BATON_PG_VERSION"
	// EnvBinDir names the folder with initdb and postgres.
	EnvBinDir = "BATON_PG_BINDIR"
	// EnvHome is where scripts/install-pg.sh installs the majors it
	// downloads, one folder each (default DefaultHome).
	EnvHome = "BATON_PG_HOME"
)

// DefaultHome is where scripts/install-pg.sh installs PostgreSQL 16, 17
// and 18 unless BATON_PG_HOME says otherwise.
const DefaultHome = "/opt/baton-pg"

// ErrNoTool is returned when the chosen binaries lack a client tool (the
// npm builds of 16–18 ship only initdb, pg_ctl and postgres).
var ErrNoTool = errors.New("PostgreSQL tool not installed")

// bindirEnv returns the variable naming the binaries' folder and its value:
// BATON_PG_BINDIR, or the older PG_BINDIR.
func bindirEnv() (name, dir string) {
	for _, name := range []string{EnvBinDir, "PG_BINDIR"} {
		if d := os.Getenv(name); d != "" {
			return name, d
		}
	}
	return "", ""
}

// versionBinDir finds the binaries of major version v: in BATON_PG_BINDIR
// if set (which must then be of that major), else in
// $BATON_PG_HOME/<v>/bin, /usr/lib/postgresql/<v>/bin or /usr/pgsql-<v>/bin.
// The postgres binary found must report that major.
func versionBinDir(v string) (string, error) {
	major, err := strconv.Atoi(v)
	if err != nil || major < 10 {
		return "", fmt.Errorf("%s=%q: want a major version such as 17", EnvVersion, v)
	}
	var candidates []string
	if _, d := bindirEnv(); d != "" {
		candidates = []string{d}
	} else {
		home := os.Getenv(EnvHome)
		if home == "" {
			home = DefaultHome
		}
		candidates = []string{filepath.Join(home, v, "bin"), "/usr/lib/postgresql/" + v + "/bin", "/usr/pgsql-" + v + "/bin"}
	}
	for _, d := range candidates {
		if !hasServer(d) {
			continue
		}
		got, err := BinMajor(d)
		if err != nil {
			return "", err
		}
		if got != major {
			return "", fmt.Errorf("%s=%d but %s holds PostgreSQL %d", EnvVersion, major, d, got)
		}
		return d, nil
	}
	return "", fmt.Errorf("PostgreSQL %d not installed (looked in %s); install it with scripts/install-pg.sh %d or run make test-pg PG=%d: %w",
		major, strings.Join(candidates, ", "), major, major, ErrNoBinaries)
}

// BinMajor runs dir's postgres --version ("postgres (PostgreSQL) 17.10")
// and returns its major version.
func BinMajor(dir string) (int, error) {
	out, err := exec.Command(filepath.Join(dir, "postgres"), "--version").Output()
	if err != nil {
		return 0, fmt.Errorf("running %s --version: %w", filepath.Join(dir, "postgres"), err)
	}
	major := parseMajor(string(out))
	if major == 0 {
		return 0, fmt.Errorf("%s --version printed %q", filepath.Join(dir, "postgres"), strings.TrimSpace(string(out)))
	}
	return major, nil
}

// parseMajor returns the major version in postgres --version's output
// ("postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)", "postgres
// (PostgreSQL) 18beta1"), or 0.
func parseMajor(out string) int {
	fields := strings.Fields(out)
	if len(fields) < 3 {
		return 0
	}
	digits := strings.IndexFunc(fields[2], func(r rune) bool { return r < '0' || r > '9' })
	if digits < 0 {
		digits = len(fields[2])
	}
	major, _ := strconv.Atoi(fields[2][:digits])
	return major
}

// Tool returns the path of the client tool name (pg_basebackup,
// pg_upgrade, ...) that goes with the server's binaries, or an error
// wrapping ErrNoTool when they lack it. A tool of another major is not
// used in its place: pg_basebackup refuses a newer server, and
// pg_upgrade must be the new major's.
func (s *Server) Tool(name string) (string, error) {
	p := filepath.Join(s.bindir, name)
	if st, err := os.Stat(p); err == nil && !st.IsDir() {
		return p, nil
	}
	return "", fmt.Errorf("%w: %s is not in %s (PostgreSQL %d)", ErrNoTool, name, s.bindir, s.major)
}

// Major is the major version of the server's binaries.
func (s *Server) Major() int { return s.major }

// BinDir is the folder the server's binaries were taken from.
func (s *Server) BinDir() string { return s.bindir }

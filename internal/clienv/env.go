package clienv

import (
	"cmp"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strings"

	"github.com/spf13/pflag"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/dberr"
	"github.com/batonhq/baton/internal/progress"
	"github.com/batonhq/baton/internal/redact"
	"github.com/batonhq/baton/schema"
)

// Env is what every command shares: the global flags and what Setup makes
// of them.
type Env struct {
	DatabaseURL string
	Schema      string
	LogFormat   string
	LogLevel    string
	Logger      *slog.Logger
	// Redactor hides database passwords in all output; Setup makes one
	// unless the caller set it.
	Redactor *redact.Redactor
	Stdout   io.Writer
	Stderr   io.Writer
	// OwnsDurability is set by commands that report commits not confirmed
	// by the standby themselves (a load names its load id; a worker logs
	// each batch); NotReplicated then leaves them alone.
	OwnsDurability bool
	// opened are the handles the command opened, whose commits PostgreSQL
	// may report as not confirmed by the synchronous standby.
	opened []*dbconn.DB
}

// Register adds the global flags to f.
func (e *Env) Register(f *pflag.FlagSet) {
	f.StringVar(&e.DatabaseURL, "database-url", "", "PostgreSQL URL (default $DATABASE_URL)")
	f.StringVar(&e.Schema, "schema", "", "PostgreSQL schema holding baton's tables (default $BATON_SCHEMA, else \"baton\")")
	f.StringVar(&e.LogFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&e.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
}

// Setup completes the flags from the environment and sets up the logger
// (the process's default too), writing to stderr through the redactor.
// Its errors are usage errors.
func (e *Env) Setup(stdout, stderr io.Writer) error {
	// Logs and progress lines share standard error: a log line ends a
	// progress line rather than being glued to it.
	e.Stdout, e.Stderr = stdout, progress.NewLine(stderr)
	if e.DatabaseURL == "" {
		e.DatabaseURL = os.Getenv("DATABASE_URL")
	}
	if e.Redactor == nil {
		e.Redactor = redact.New()
	}
	e.Redactor.Add(e.DatabaseURL)
	if e.Schema == "" {
		e.Schema = cmp.Or(os.Getenv("BATON_SCHEMA"), schema.Default)
	}
	if err := schema.Validate(e.Schema); err != nil {
		return UsageError("--schema: %v", err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(e.LogLevel)); err != nil {
		return UsageError("--log-level %q: want debug, info, warn or error", e.LogLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(e.LogFormat) {
	case "text":
		e.Logger = slog.New(e.Redactor.Handler(slog.NewTextHandler(e.Stderr, opts)))
	case "json":
		e.Logger = slog.New(e.Redactor.Handler(slog.NewJSONHandler(e.Stderr, opts)))
	default:
		return UsageError("--log-format %q: want text or json", e.LogFormat)
	}
	slog.SetDefault(e.Logger)
	return nil
}

// ReportError writes the error a command failed with: a log record with
// --log-format json once the logger is set up, else "worker: " and the
// message on stderr.
func (e *Env) ReportError(stderr io.Writer, err error) {
	if e.Logger != nil && e.LogFormat == "json" {
		e.Logger.Error("command failed", "event", "error", "error", dberr.Message(err))
		return
	}
	fmt.Fprintln(stderr, "worker:", dberr.Message(err))
}

// DatabaseURLArgs returns the values given to --database-url and
// --listen-database-url in args, so that they are redacted even when flag
// parsing fails.
func DatabaseURLArgs(args []string) []string {
	var urls []string
	for i, a := range args {
		for _, flag := range []string{"--database-url", "--listen-database-url"} {
			if v, ok := strings.CutPrefix(a, flag+"="); ok {
				urls = append(urls, v)
			} else if a == flag && i+1 < len(args) {
				urls = append(urls, args[i+1])
			}
		}
	}
	return urls
}

// Operator names who runs a command that records its author (a
// re-pricing, a pause): "worker COMMAND (user@host)", from the operating
// system's user and host names.
func Operator(command string) string {
	who := "unknown"
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	if h, err := os.Hostname(); err == nil {
		who += "@" + h
	}
	return "worker " + command + " (" + who + ")"
}

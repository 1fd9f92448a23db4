package clienv

import (
	"errors"
	"fmt"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/demo"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/export"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/schema"
	"github.com/batonhq/baton/workerproc"
)

// Exit codes, as ExitCodesHelp and the README's table document them.
const (
	ExitFailure    = 1
	ExitUsage      = 2
	ExitBadInput   = 3
	ExitIncomplete = 4
	ExitNotFound   = 5
	// ExitNotReplicated: the command's changes committed on the primary,
	// but PostgreSQL reported that its synchronous standby did not
	// confirm them (dbconn.ErrNotReplicated).
	ExitNotReplicated = 6
)

// ExitCodesHelp is the exit-code table shown by --help.
const ExitCodesHelp = `Exit codes:
  0  success
  1  failure: the database failed or is unreachable, verification failed,
     an output file could not be written, or a second signal cut a
     graceful stop short
  2  bad usage or configuration: unknown command or flag, a missing or
     extra argument, a flag value out of range, a missing input file, no
     or a malformed database URL, a schema this binary does not match
  3  invalid input: rows of the input files break the rules (nothing was
     loaded)
  4  work left: contracts are quarantined (run --until-done), or records
     are unpriced (export --complete)
  5  not found: no such contract (retry) or job (schedule trigger,
     schedule remove)
  6  not confirmed by the standby: the changes committed on the primary,
     but PostgreSQL stopped waiting for its synchronous standby (an HA
     manager dropped it, or the session was cancelled at COMMIT), so a
     failover may lose them; check once the cluster is stable (worker
     status --loads for a load) and run the command again if they are
     missing
  130, 143
     interrupted by SIGINT (130) or SIGTERM (143) before a load
     committed: nothing was loaded (load, seed --load)`

// ExitError is an error with the exit code it ends the command with.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Exit returns err ending the command with code.
func Exit(code int, err error) error { return &ExitError{code, err} }

// UsageError is a usage error (exit 2) with a formatted message.
func UsageError(format string, args ...any) error {
	return &ExitError{ExitUsage, fmt.Errorf(format, args...)}
}

// RewordedError says what Err means in a command's words (contracts
// rather than partitions, say) while errors.Is still finds Err.
type RewordedError struct {
	Msg string
	Err error
}

func (e *RewordedError) Error() string { return e.Msg }
func (e *RewordedError) Unwrap() error { return e.Err }

// Reworded returns err described by msg.
func Reworded(err error, msg string) error { return &RewordedError{msg, err} }

// ExitCode maps an error to the documented exit codes: the code an
// ExitError carries, else the first row of exitCodes that matches.
func ExitCode(err error) int {
	if ee, ok := errors.AsType[*ExitError](err); ok {
		return ee.Code
	}
	for _, row := range exitCodes {
		if row.matches(err) {
			return row.code
		}
	}
	return ExitFailure
}

// exitCodes maps the typed errors of the packages the commands call to
// the exit codes ExitCodesHelp documents.
var exitCodes = []struct {
	code    int
	matches func(error) bool
}{
	{ExitUsage, isType[*demo.UsageError]},
	// A schema that does not exist, lacks migrations or is newer than
	// this binary: the flags (--schema) or the deployment are wrong.
	{ExitUsage, is(schema.ErrOutdated)},
	{ExitUsage, is(schema.ErrTooNew)},
	// A worker's server that cannot start: its address is taken or wrong.
	{ExitUsage, isType[*workerproc.StartError]},
	{ExitBadInput, isType[*ingest.InvalidInputError]},
	{ExitIncomplete, is(distributor.ErrIncomplete)},
	{ExitIncomplete, is(export.ErrIncomplete)},
	{ExitIncomplete, is(pricer.ErrNotPruned)},
	{ExitNotFound, is(partition.ErrNotFound)},
	{ExitNotReplicated, is(dbconn.ErrNotReplicated)},
}

func is(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

func isType[E error](err error) bool {
	_, ok := errors.AsType[E](err)
	return ok
}

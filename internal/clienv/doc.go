// Package clienv is the environment every worker command runs in: running
// a command line with standard error behind the password redactor
// (execute.go); the database URL (flag or $DATABASE_URL) and schema (flag,
// $BATON_SCHEMA or "baton"), the logger and the redactor that keeps
// database passwords out of everything written (env.go); opening the
// database with a schema check or while waiting for it to answer, the
// readiness check, and the summary of commits the synchronous standby did
// not confirm (open.go); and the typed errors of the command line with
// their documented exit codes (exit.go), a wrong command line's included
// (usage.go).
package clienv

// Package demo holds the worker binary's demos: "worker demo" (three
// pricing workers, one SIGKILLed part-way, the takeover, an exact
// verification) and "worker schedule demo" (scheduled jobs through a
// SIGKILL and a SIGSTOP).
//
// A demo never touches the database it is pointed at: with a URL it
// creates a database of its own on that server and drops it at the end;
// without one it runs a private PostgreSQL from the local binaries
// (pglocal.StartWithDatabase). It starts its workers as processes of the
// worker binary ("worker run"), so what it shows is what a farm of
// workers does. Errors the user must fix (a role that cannot create a
// database, a data directory in use) are *UsageError.
package demo

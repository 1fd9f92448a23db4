// Package console serves baton's operator console: a web view of the
// contracts (partitions), their ownership history, the live workers and
// the scheduled jobs.
//
// Everything is rendered on the server from templates embedded in the
// binary, so the tables, search, filters and sorting work without
// JavaScript; a small script subscribes to server-sent events (/events)
// and refreshes the page's live region as the numbers change.
//
// The console reads the same tables the workers write and holds no state
// of its own beyond the last sample of positions (for records/s). It is
// read-only unless Config.Token is set: actions (retry a quarantined
// contract, trigger a job) are POST forms that must carry the token, and
// cross-origin POSTs are refused (net/http's CrossOriginProtection), so a
// page elsewhere cannot make an operator's browser act. It binds to
// loopback by default.
package console

// Package console serves baton's operator console: a web view of the
// partitions, their ownership history, the worker instances (live,
// expired or stopped) and the scheduled jobs.
//
// The overview also shows what holds back vacuum (package horizon): the
// oldest transactions holding back the xmin horizon on the server, and the
// dead row versions of the schema's tables; past Config.HorizonWarnAfter
// the section is highlighted under a warning banner.
//
// The console knows only the generic task tables (tasks, workers, events,
// jobs). What a partition is and what its work items are called comes
// from Config (Noun, Nouns, ItemUnit): a pricing deployment calls them
// contracts and records, and its partitions are listed at /contracts.
//
// Everything is rendered on the server from templates embedded in the
// binary, so the tables, search, filters and sorting work without
// JavaScript; a small script subscribes to server-sent events (/events)
// and refreshes the page's live region as the numbers change.
//
// The console reads the same tables the workers write and holds no state
// of its own beyond the last sample of positions (for items/s). It is
// read-only unless Config.Token is set: actions (retry a quarantined
// partition, trigger a job) are POST forms that must carry the token, and
// cross-origin POSTs are refused (net/http's CrossOriginProtection), so a
// page elsewhere cannot make an operator's browser act. It binds to
// loopback by default.
package console

package distributor

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/heartbeat"
	"github.com/batonhq/baton/internal/keepalive"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/schema"
)

// Mode says what a worker does with a partition that has caught up.
type Mode string

const (
	// ModeLock releases a partition as soon as it has no pending work.
	ModeLock Mode = "lock"
	// ModeLeader keeps caught-up partitions and processes new work on them
	// as it arrives.
	ModeLeader Mode = "leader"
)

// Defaults. Each Config field documents its own.
const (
	HeartbeatDefault       = heartbeat.IntervalDefault
	StaleAfterDefault      = heartbeat.StaleAfterDefault
	ConfirmDefault         = heartbeat.ConfirmDefault
	MaxPartitionsDefault   = 8
	ClaimGroupDefault      = 16
	ClaimGroupItemsDefault = 65536
	BatchSizeDefault       = 16384
	BatchTargetDefault     = time.Second
	SegmentRecordsDefault  = 100_000
	MaxAttemptsDefault     = 5
	BackoffDefault         = time.Second
	MaxBackoffDefault      = 5 * time.Minute
	ShutdownTimeoutDefault = 10 * time.Second
	EventRetentionDefault  = 7 * 24 * time.Hour
	EventMaxRowsDefault    = 1_000_000
	KeyAttrDefault         = keepalive.KeyAttrDefault
)

// The claim floor's defaults (see FloorMargin and FullReadInterval).
const (
	FloorMarginDefault      = taskstore.FloorMargin
	FullReadIntervalDefault = taskstore.FullReadEvery
)

// Config configures a Distributor.
type Config struct {
	// Schema is the PostgreSQL schema holding baton's tables, as migrated
	// by schema.Migrate. Defaults to schema.Default ("baton").
	Schema string
	// Kind names the partitions this worker processes, as a job's kind
	// names its queue: it claims, renews and advances task rows of this
	// kind only, counts only the live workers and the work of this kind
	// for its fair share, and ignores notifications about other kinds.
	// Producers add work under the same kind (partition.Store.Kind), so
	// several processors can share one schema, even with partitions of
	// the same names, without ever touching each other's work. Defaults
	// to the Processor's own kind if it has one (Kinded; the pricer's is
	// "pricing"), else partition.DefaultKind ("default"); a Kind that
	// differs from the Processor's is refused. At most
	// partition.MaxKindLen bytes, no white space.
	Kind string
	// Name identifies the worker in status and logs. The owner recorded in
	// task rows is Name plus a unique suffix, so a restarted process with
	// the same name does not inherit claims. Defaults to the host name.
	Name string
	// Heartbeat is the renewal interval. Defaults to 1s.
	Heartbeat time.Duration
	// StaleAfter is the lease length: a partition whose owner has not
	// renewed for this long (by the database clock) may be taken over.
	// Defaults to 10s; must be at least 3 × Heartbeat.
	StaleAfter time.Duration
	// SafetyMargin: processing stops this long before the lease would end
	// without a successful renewal, by the local monotonic clock. Defaults
	// to the larger of Heartbeat/2 and StaleAfter/5.
	SafetyMargin time.Duration
	// Confirm is how many consecutive successful heartbeats a taken-over
	// partition needs before it is processed. Defaults to 3.
	Confirm int
	// MaxPartitions caps the partitions held at once. Defaults to 8. The
	// database pool needs PoolSize connections.
	MaxPartitions int
	// BatchSize is the most work items per committed batch. Defaults to
	// 16,384. Batches are sized by time within it (BatchTarget): a worker
	// starts at min(BatchSize, 1000) items per batch and doubles that,
	// up to BatchSize, after each batch that took all the items it was
	// allowed and committed within half of BatchTarget, and halves it,
	// down to where it started, after a batch that took more than twice
	// BatchTarget. Set it to the start (1000 or less) for batches of a
	// fixed size. Every batch has a fixed cost (its transaction, fence,
	// checkpoint and WAL flush, and the setup of its output's COPY), so
	// batches of a few thousand items cost less per item than batches of
	// a thousand. A batch that turns out too long for the statement
	// timeout or the lease (the server cancels it, or its deadline passes)
	// is rolled back and tried again at once with half as many items,
	// down to one, without counting as a failure; the worker keeps the
	// lower size for its next batches and doubles it back, up to
	// BatchSize, after a batch at that size ends in less than a quarter of
	// StaleAfter/2 (the statement timeout ConnectionLimits recommends). So
	// any BatchSize finishes; a large one only costs the first attempts.
	BatchSize int
	// BatchTarget is the time a batch should take, from its start to its
	// commit: batch sizes grow while batches take less than half of it and
	// shrink once one takes more than twice it (see BatchSize). A longer
	// target makes fewer, larger transactions; a batch holds its
	// partition's row locked (FOR KEY SHARE) until it commits, so a
	// release, a rebalance's hand-back or a graceful stop waits for it.
	// Defaults to 1s, or StaleAfter/8 when that is shorter; at most
	// StaleAfter/4.
	BatchTarget time.Duration
	// ClaimGroup is the most partitions nobody owns that are claimed and
	// given their first batch together, in one transaction, when the
	// worker has room for several and the Processor implements
	// GroupProcessor; and the most held partitions whose batches, queued
	// while another batch of the worker was in flight, commit together
	// in one transaction. In lock mode, while MaxPartitions rather than
	// the fair share bounds the worker, a group's members beyond its room
	// are small partitions its first batches finish (riders), released
	// with the commit, caught up or not, so a group may exceed
	// MaxPartitions but the partitions held never do. Defaults to 16; 1
	// claims each in a transaction of its own and runs every batch alone.
	ClaimGroup int
	// ClaimGroupItems is the most work items a group's batches (first
	// batches, or held partitions' batches) take in all: the group's
	// output is written in one transaction, which must
	// end well within the statement timeout and the lease. Members share
	// it (one with little work takes all of it, the others share the
	// rest evenly); a member not caught up by its first batch goes on in
	// batches of its own. Groups are sized by time within it, as batches
	// are (BatchTarget): the worker halves its group bound after a group
	// that took more than twice BatchTarget (down to where batches start)
	// and doubles it, up to ClaimGroupItems, after a group that took all
	// it was allowed within half of BatchTarget, since a group holds all
	// its members' rows until it commits; and it lowers the bound for a
	// while after a group turned out too long (see BatchSize). Defaults to
	// 65,536.
	ClaimGroupItems int
	// SegmentRecords is the size, in work items, of the segments a
	// partition's backlog is split into when the Processor is a Splitter:
	// a partition holding more than twice as many unprocessed items is
	// split, by the batch that finds it so, into segments of about this
	// many items (where the processor allows a segment to start; a little
	// fewer when that makes their number a multiple of the live workers,
	// so that those share them evenly), which
	// any worker claims and processes like partitions, at the same time
	// (see Splitter). Defaults to 100,000, about a second of a pricing
	// worker's time: large enough that a segment's claim and release cost
	// little against its work, small enough that a contract of a million
	// records keeps ten workers busy. It must be positive; a processor
	// that is not a Splitter is never split.
	SegmentRecords int64
	// Mode is ModeLock (default) or ModeLeader.
	Mode Mode
	// UntilDone makes Run return once no partition has pending work and
	// none is held. Requires ModeLock.
	UntilDone bool
	// PollInterval is how often to look for claimable work when no
	// notification arrives. Defaults to Heartbeat.
	PollInterval time.Duration
	// RebalanceInterval is how often the fair share is recomputed.
	// Defaults to 5 × Heartbeat.
	RebalanceInterval time.Duration
	// SpreadTakeovers is how long a worker leaves a dead worker's
	// partitions beyond its fair share (recomputed when it finds them:
	// the live workers, what they hold and what is claimable) to the other
	// live workers, who find them at their next poll; once it has seen
	// one waiting this long it takes it itself, up to MaxPartitions. So a
	// dead worker's partitions spread over the survivors at takeover
	// instead of going to the first that notices and being handed back
	// after confirmation, and none waits longer than this for a live
	// worker that does not take it (one at its own MaxPartitions, say).
	// A worker alone takes them all at once. Defaults to 2 ×
	// PollInterval; negative takes every one found at once, up to
	// MaxPartitions, whatever the share.
	SpreadTakeovers time.Duration
	// FloorMargin is how far below the earliest claimable partition its
	// last read found a worker's next read of the claimable partitions
	// starts (the claim floor; see docs/protocol.md): longer
	// than a release or a producer's statement usually takes to commit.
	// Defaults to 10s (taskstore.FloorMargin).
	FloorMargin time.Duration
	// FullReadInterval is how often, by Clock, a worker reads the
	// claimable partitions from the beginning instead of from its floor:
	// a partition whose commit came more than FloorMargin after it became
	// claimable (a stalled commit, a database clock that stepped back),
	// and that no notification announced, waits at most this long, plus
	// a poll, to be read. Defaults to 30s.
	FullReadInterval time.Duration
	// MaxAttempts is how many failed attempts quarantine a partition.
	// Defaults to 5.
	MaxAttempts int
	// Backoff is the delay after a partition's first failure, doubled
	// after each further one up to MaxBackoff. Defaults to 1s and 5m.
	// A failed claim round is retried on the same schedule, never later
	// than the next poll.
	Backoff    time.Duration
	MaxBackoff time.Duration // see Backoff
	// ShutdownTimeout bounds a graceful stop: batches still running after
	// it are abandoned (rolled back). Defaults to 10s.
	ShutdownTimeout time.Duration
	// StartTimeout bounds how long Start keeps registering the worker
	// while the database answers with errors that say nothing about the
	// data (restarting, failing over, connections refused, cut or timing
	// out), retrying with back-off. A worker started during an outage
	// then waits for the database instead of failing. Defaults to
	// StaleAfter, and is never shorter than 10s.
	StartTimeout time.Duration
	// DisableEvents turns off the ownership history (table events) that
	// claims, takeovers, first batches, releases, fence rejections,
	// failures and retries otherwise record in their own statements.
	DisableEvents bool
	// EventRetention is how long events are kept; EventMaxRows bounds
	// their number. Workers prune them about once a minute. Defaults to 7
	// days and 1,000,000 rows.
	EventRetention time.Duration
	EventMaxRows   int64 // see EventRetention
	// KeyAttr is the log attribute name for partition keys. Defaults to
	// KeyAttrDefault.
	KeyAttr string
	// Clock is the local clock. Defaults to the real clock.
	Clock clockwork.Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// ListenDB, if set, is a handle on a direct (session) connection to the
	// same database, used only to LISTEN for new work. Without it the
	// worker listens on a connection to the main handle's ListenURL
	// (dbconn.Options.ListenURL, dbconn.Access.ListenURL) if it has one,
	// else over its main handle, unless that goes through a transaction
	// pooler (dbconn.DB.Pooled): then it polls every PollInterval.
	ListenDB *dbconn.DB
	// PollOnly never listens: the worker looks for work every PollInterval
	// only. For engines without LISTEN/NOTIFY (docs/engines.md).
	PollOnly bool
	// OnEvent, if set, is called synchronously for every protocol event.
	// It must not block.
	OnEvent func(Event)
	// OnHeartbeat, if set, is called after every heartbeat with its
	// outcome, latency and the number of partitions renewed.
	OnHeartbeat func(err error, latency time.Duration, renewed int)
}

func (c *Config) setDefaults() {
	if c.Name == "" {
		c.Name, _ = os.Hostname()
		c.Name = cmp.Or(c.Name, "worker")
	}
	c.Heartbeat = cmp.Or(c.Heartbeat, HeartbeatDefault)
	c.StaleAfter = cmp.Or(c.StaleAfter, StaleAfterDefault)
	c.SafetyMargin = cmp.Or(c.SafetyMargin, max(c.Heartbeat/2, c.StaleAfter/5))
	c.Confirm = cmp.Or(c.Confirm, ConfirmDefault)
	c.MaxPartitions = cmp.Or(c.MaxPartitions, MaxPartitionsDefault)
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.BatchTarget = cmp.Or(c.BatchTarget, min(BatchTargetDefault, c.StaleAfter/8))
	c.ClaimGroup = cmp.Or(c.ClaimGroup, ClaimGroupDefault)
	c.ClaimGroupItems = cmp.Or(c.ClaimGroupItems, ClaimGroupItemsDefault)
	c.SegmentRecords = cmp.Or(c.SegmentRecords, SegmentRecordsDefault)
	c.Mode = cmp.Or(c.Mode, ModeLock)
	c.PollInterval = cmp.Or(c.PollInterval, c.Heartbeat)
	c.RebalanceInterval = cmp.Or(c.RebalanceInterval, 5*c.Heartbeat)
	c.SpreadTakeovers = cmp.Or(c.SpreadTakeovers, 2*c.PollInterval)
	c.FloorMargin = cmp.Or(c.FloorMargin, FloorMarginDefault)
	c.FullReadInterval = cmp.Or(c.FullReadInterval, FullReadIntervalDefault)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, MaxAttemptsDefault)
	c.Backoff = cmp.Or(c.Backoff, BackoffDefault)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, MaxBackoffDefault)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, ShutdownTimeoutDefault)
	if c.StartTimeout >= 0 { // a negative one is left for validate to refuse
		c.StartTimeout = max(cmp.Or(c.StartTimeout, c.StaleAfter), registerTimeout)
	}
	c.EventRetention = cmp.Or(c.EventRetention, EventRetentionDefault)
	c.EventMaxRows = cmp.Or(c.EventMaxRows, EventMaxRowsDefault)
	c.KeyAttr = cmp.Or(c.KeyAttr, KeyAttrDefault)
	c.Schema = cmp.Or(c.Schema, schema.Default)
	c.Kind = cmp.Or(c.Kind, partition.DefaultKind)
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c Config) heartbeatConfig() keepalive.Config {
	return keepalive.Config{
		Interval: c.Heartbeat, StaleAfter: c.StaleAfter, SafetyMargin: c.SafetyMargin,
		Confirm: c.Confirm, Clock: c.Clock, Logger: c.Logger, OnBeat: c.OnHeartbeat, KeyAttr: c.KeyAttr,
	}
}

// validate rejects impossible combinations (after defaults are applied).
func (c Config) validate() error {
	var errs []error
	if err := schema.Validate(c.Schema); err != nil {
		errs = append(errs, fmt.Errorf("invalid Schema: %w", err))
	}
	if err := partition.ValidateKind(c.Kind); err != nil {
		errs = append(errs, fmt.Errorf("invalid Kind: %w", err))
	}
	if strings.Contains(c.Name, partition.InstanceSeparator) {
		errs = append(errs, fmt.Errorf("worker Name %q must not contain %q", c.Name, partition.InstanceSeparator))
	}
	if err := c.heartbeatConfig().Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Mode != ModeLock && c.Mode != ModeLeader {
		errs = append(errs, fmt.Errorf("Mode must be %q or %q, got %q", ModeLock, ModeLeader, c.Mode))
	}
	if c.UntilDone && c.Mode != ModeLock {
		errs = append(errs, errors.New("UntilDone needs Mode lock: a leader keeps caught-up partitions and never finishes"))
	}
	if c.MaxPartitions < 1 {
		errs = append(errs, fmt.Errorf("MaxPartitions must be at least 1, got %d", c.MaxPartitions))
	}
	if c.SegmentRecords < 1 {
		errs = append(errs, fmt.Errorf("SegmentRecords must be positive, got %d", c.SegmentRecords))
	}
	if c.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("BatchSize must be at least 1, got %d", c.BatchSize))
	}
	if c.BatchTarget <= 0 || c.BatchTarget > c.StaleAfter/4 {
		errs = append(errs, fmt.Errorf("BatchTarget must be positive and at most StaleAfter/4 (%v), got %v", c.StaleAfter/4, c.BatchTarget))
	}
	if c.ClaimGroup < 1 {
		errs = append(errs, fmt.Errorf("ClaimGroup must be at least 1, got %d", c.ClaimGroup))
	}
	if c.ClaimGroupItems < 1 {
		errs = append(errs, fmt.Errorf("ClaimGroupItems must be at least 1, got %d", c.ClaimGroupItems))
	}
	if c.PollInterval <= 0 || c.RebalanceInterval <= 0 {
		errs = append(errs, errors.New("PollInterval and RebalanceInterval must be positive"))
	}
	if c.FloorMargin <= 0 || c.FullReadInterval <= 0 {
		errs = append(errs, fmt.Errorf("FloorMargin (%s) and FullReadInterval (%s) must be positive", c.FloorMargin, c.FullReadInterval))
	}
	if c.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("MaxAttempts must be at least 1, got %d", c.MaxAttempts))
	}
	if c.Backoff <= 0 || c.MaxBackoff < c.Backoff {
		errs = append(errs, fmt.Errorf("initial Backoff (%s) must be positive and at most MaxBackoff (%s)", c.Backoff, c.MaxBackoff))
	}
	if c.EventRetention <= 0 || c.EventMaxRows < 1 {
		errs = append(errs, fmt.Errorf("EventRetention (%s) and EventMaxRows (%d) must be positive", c.EventRetention, c.EventMaxRows))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("ShutdownTimeout must be positive, got %s", c.ShutdownTimeout))
	}
	if c.StartTimeout < 0 {
		errs = append(errs, fmt.Errorf("StartTimeout must not be negative, got %s", c.StartTimeout))
	}
	return errors.Join(errs...)
}

// Validate applies defaults to a copy of c and reports impossible
// combinations.
func (c Config) Validate() error {
	c.setDefaults()
	return c.validate()
}

// PoolSize is the most database connections a distributor with this
// configuration uses at once: one per partition held (its batch), plus the
// heartbeat's own connection, the listening connection and one for claims,
// releases and the other short statements. Give the *bun.DB's pool
// (SetMaxOpenConns) at least this many.
func (c Config) PoolSize() int {
	c.setDefaults()
	return c.MaxPartitions + 3
}

// ConnectionLimits returns the server-side limits a worker's connections
// should carry so that a hung or cut-off worker cannot hold a row lock that
// blocks a takeover: every statement, lock wait and idle transaction ends
// well within the lease.
func (c Config) ConnectionLimits() (statement, lock, idleInTx time.Duration) {
	c.setDefaults()
	return c.StaleAfter / 2, c.StaleAfter / 4, c.StaleAfter / 2
}

package cliflags

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/partition"
)

// Distributor adds a worker's distributor settings to f, stored in cfg:
// its name, lease timing, holding, batch sizing, claim groups, segments,
// mode, failures and stopping.
func Distributor(f *pflag.FlagSet, cfg *distributor.Config) {
	f.StringVar(&cfg.Name, "id", "", "worker name shown in status and logs (default: host name); a unique suffix is added per process")
	f.DurationVar(&cfg.Heartbeat, "heartbeat", distributor.HeartbeatDefault, "heartbeat interval")
	f.DurationVar(&cfg.StaleAfter, "stale-after", distributor.StaleAfterDefault, "lease length: a contract not renewed for this long may be taken over (≥ 3 × heartbeat)")
	f.IntVar(&cfg.Confirm, "confirm", distributor.ConfirmDefault, "consecutive heartbeats a taken-over contract needs before it is priced")
	f.IntVar(&cfg.MaxPartitions, "max-partitions", distributor.MaxPartitionsDefault, "most contracts held at once")
	f.IntVar(&cfg.BatchSize, "batch-size", distributor.BatchSizeDefault, "most records priced per committed batch; batches start at 1000 (or this, if lower) and grow while quicker than --batch-target (halved for a while after a batch too long for the statement timeout)")
	f.DurationVar(&cfg.BatchTarget, "batch-target", 0, "time a batch should take: batch sizes grow, up to --batch-size, while batches take less than half of it and shrink after one takes twice it (0: 1s, or --stale-after/8 if shorter; at most --stale-after/4)")
	f.IntVar(&cfg.ClaimGroup, "claim-group", distributor.ClaimGroupDefault, "most unclaimed contracts claimed and given their first batch in one transaction, and most held contracts' batches committed in one (1: each in its own)")
	f.IntVar(&cfg.ClaimGroupItems, "claim-group-records", distributor.ClaimGroupItemsDefault, "most records priced in all by the batches of one --claim-group transaction")
	f.Int64Var(&cfg.SegmentRecords, "segment-records", distributor.SegmentRecordsDefault, "split a contract with more than twice this many unpriced records into segments of about this many, which several workers price at once")
	f.StringVar((*string)(&cfg.Mode), "mode", string(distributor.ModeLock), "lock: release caught-up contracts; leader: keep them and price new records as they arrive")
	f.BoolVar(&cfg.UntilDone, "until-done", false, "exit once no contract has unpriced records and none is held")
	f.IntVar(&cfg.MaxAttempts, "max-attempts", distributor.MaxAttemptsDefault, "failed attempts before a contract is quarantined")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", distributor.ShutdownTimeoutDefault, "how long a graceful stop waits for batches in flight")
	f.DurationVar(&cfg.SpreadTakeovers, "spread-takeovers", 0, "how long a dead worker's contracts beyond this worker's fair share are left to the other live workers before it takes them itself (0: 2 × the poll interval; negative: take every one found at once)")
	f.BoolVar(&cfg.PollOnly, "poll-only", false, "never LISTEN: look for new work every heartbeat only (for databases without LISTEN/NOTIFY)")
	Positive(f, "heartbeat", "stale-after", "confirm", "max-partitions", "batch-size", "claim-group", "claim-group-records", "segment-records", "max-attempts", "shutdown-timeout")
	NonNegative(f, "batch-target")
	AnyValue(f, "spread-takeovers")
}

// CheckDistributor refuses the values of Distributor's flags that the
// distributor would refuse, in the flags' own words rather than its
// configuration fields'. (Zero and negative values are refused before, by
// Check.)
func CheckDistributor(cfg distributor.Config) error {
	switch cfg.Mode {
	case distributor.ModeLock, distributor.ModeLeader:
	default:
		return fmt.Errorf("--mode must be %s or %s, got %q", distributor.ModeLock, distributor.ModeLeader, cfg.Mode)
	}
	if cfg.UntilDone && cfg.Mode != distributor.ModeLock {
		return fmt.Errorf("--until-done needs --mode %s: a leader keeps caught-up contracts and never finishes", distributor.ModeLock)
	}
	if strings.Contains(cfg.Name, partition.InstanceSeparator) {
		return fmt.Errorf("--id %q must not contain %q (it separates the name from the per-process suffix)", cfg.Name, partition.InstanceSeparator)
	}
	if cfg.StaleAfter < 3*cfg.Heartbeat {
		return fmt.Errorf("--stale-after (%s) must be at least 3 × --heartbeat (%s), so that a lease survives a missed beat",
			cfg.StaleAfter, cfg.Heartbeat)
	}
	return nil
}

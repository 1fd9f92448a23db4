package demo

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/batonhq/baton/partition"
)

// kill is the pricing demo's crash: the worker it SIGKILLed and what the
// history says of the takeovers of its contracts.
type kill struct {
	view     View
	victim   int    // the demo worker killed (demo-N), 0 before the kill
	victimID string // its instance id (name#suffix)
	taken    partition.InstanceTakeovers
	complete bool // every contract taken over has its first batch
}

// strike SIGKILLs the live demo worker holding the most contracts, if
// any, and notes which contracts it held.
func (k *kill) strike(procs []*exec.Cmd, parts []partition.PartitionStatus, workers []partition.WorkerStatus, total int64) {
	victim, held := 0, 0
	for _, w := range workers {
		var i int
		if _, err := fmt.Sscanf(w.Name, "demo-%d", &i); err == nil && w.Owned > held {
			victim, held = i, w.Owned
		}
	}
	if victim == 0 {
		return
	}
	_ = procs[victim-1].Process.Signal(syscall.SIGKILL)
	k.victim = victim
	name := fmt.Sprintf("demo-%d", victim)
	for _, w := range workers {
		if w.Name == name {
			k.victimID = w.InstanceID
		}
	}
	var orphaned []string // the contracts it held
	for _, p := range parts {
		if p.Owner == name {
			orphaned = append(orphaned, p.Key)
		}
	}
	k.view.Note(fmt.Sprintf("SIGKILL %s (pid %d) at %d%% priced, holding %d contracts: %s",
		name, procs[victim-1].Process.Pid, 100*processed(parts)/total, held, listed(orphaned)))
}

// follow reads the takeovers and notes the first one and the last. A
// takeover's time comes from the history, by the database clock: from the
// dead owner's last heartbeat that renewed the lease to the new owner's
// first committed batch. (The moment of the kill says nothing of when
// the lease started to run out: that was the renewal before it.)
func (k *kill) follow(ctx context.Context, store *partition.Store) error {
	was := k.taken
	t, err := store.TakeoversFrom(ctx, k.victimID)
	if err != nil {
		return err
	}
	k.taken, k.complete = t, t.Complete()
	if t.Resumed > 0 && was.Resumed == 0 {
		k.view.Note(fmt.Sprintf("takeover: %s took over %s from demo-%d: its first batch %s after demo-%d's last heartbeat (the lease is 1s; bound: stale-after 1s + poll 0.2s + 3 × 200ms heartbeats + a batch)",
			partition.InstanceName(t.FirstBy), partition.PartitionOf(t.FirstKey), k.victim, t.Min.Round(10*time.Millisecond), k.victim))
	}
	if t.Complete() && t.Taken > 0 {
		k.view.Note(fmt.Sprintf("all %d contracts taken over from demo-%d have their first batch: takeover times %s to %s",
			t.Taken, k.victim, t.Min.Round(10*time.Millisecond), t.Max.Round(10*time.Millisecond)))
	}
	return nil
}

// listed lists keys, the first six and how many more.
func listed(keys []string) string {
	if len(keys) > 6 {
		return strings.Join(keys[:6], ", ") + fmt.Sprintf(" and %d more", len(keys)-6)
	}
	return strings.Join(keys, ", ")
}

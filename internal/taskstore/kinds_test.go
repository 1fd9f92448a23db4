package taskstore_test

import (
	"context"
	"errors"
	"github.com/batonhq/baton/internal/notify"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// Two kinds with partitions of the same names in one schema: every
// statement of a store of one kind sees, claims, renews, fences, advances,
// releases, fails, retries and reports its own kind's rows only, however
// alike the other kind's rows are (same key, version and position).
func TestKindsKeepTheirPartitionsApart(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	pricing := taskstore.NewStore(db, "").Kind("pricing")
	orders := taskstore.NewStore(db, "").Kind("orders")
	if _, err := pricing.Admin().AddWorks(ctx, []partition.Work{{Key: "acme", N: 5}, {Key: "globex", N: 2}}); err != nil {
		t.Fatal(err)
	}
	if _, err := orders.Admin().AddWorks(ctx, []partition.Work{{Key: "acme", N: 3}, {Key: "initech", N: 1}}); err != nil {
		t.Fatal(err)
	}
	available := func(kind, key string) (avail, pos int64) {
		t.Helper()
		if err := db.QueryRowContext(ctx, `SELECT available, position FROM baton.tasks WHERE kind = ? AND partition_key = ?`,
			kind, key).Scan(&avail, &pos); err != nil {
			t.Fatalf("%s/%s: %v", kind, key, err)
		}
		return avail, pos
	}
	if a, _ := available("pricing", "acme"); a != 5 {
		t.Fatalf("pricing acme available = %d, want 5: another kind's work was added to it", a)
	}
	if a, _ := available("orders", "acme"); a != 3 {
		t.Fatalf("orders acme available = %d, want 3", a)
	}

	keys := func(cs []taskstore.Candidate) string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Key)
		}
		return strings.Join(out, ",")
	}
	pc, err := pricing.Candidates(ctx, 10)
	if err != nil || keys(pc) != "acme,globex" && keys(pc) != "globex,acme" {
		t.Fatalf("pricing candidates = %v, %v; want acme and globex", pc, err)
	}
	oc, err := orders.Candidates(ctx, 10)
	if err != nil || keys(oc) != "acme,initech" && keys(oc) != "initech,acme" {
		t.Fatalf("orders candidates = %v, %v; want acme and initech", oc, err)
	}
	// The same key at the same version: a claim of the orders' store wins
	// its own row only.
	acme := taskstore.Candidate{Key: "acme", Version: 0}
	won, err := orders.Claim(ctx, "o#1", time.Minute, []taskstore.Candidate{acme, {Key: "globex"}})
	if err != nil || len(won) != 1 || won[0].Key != "acme" || won[0].Available != 3 {
		t.Fatalf("orders' claim = %+v, %v; want its own acme (3 items) only, not pricing's globex", won, err)
	}
	ol := won[0].Lease
	if c, err := pricing.Candidates(ctx, 10); err != nil || len(c) != 2 {
		t.Fatalf("pricing candidates after the orders' claim = %v, %v; want both still claimable", c, err)
	}
	won, err = pricing.Claim(ctx, "p#1", time.Minute, []taskstore.Candidate{acme})
	if err != nil || len(won) != 1 || won[0].Available != 5 {
		t.Fatalf("pricing's claim of acme = %+v, %v; want its own (5 items)", won, err)
	}
	pl := won[0].Lease
	if pl != ol {
		t.Fatalf("leases %v and %v: the test wants both kinds' acme at the same version", pl, ol)
	}

	// Heartbeats renew their own kind's lease only, even given the other's
	// (same key and version) with the other's owner.
	if rs, err := orders.Heartbeat(ctx, taskstore.Worker{InstanceID: "p#1", Name: "p"}, time.Minute, []partition.Lease{pl}); err != nil || len(rs) != 0 {
		t.Fatalf("an orders heartbeat for pricing's owner = %v, %v; want nothing renewed", rs, err)
	}
	if rs, err := orders.Heartbeat(ctx, taskstore.Worker{InstanceID: "o#1", Name: "o"}, time.Minute, []partition.Lease{ol}); err != nil || len(rs) != 1 || rs[0].Available != 3 {
		t.Fatalf("orders' heartbeat = %v, %v; want its acme (3 items)", rs, err)
	}

	// A batch of orders' acme advances the orders' checkpoint only; a fence
	// of the orders' kind under pricing's owner finds nothing.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := orders.Fence(ctx, tx, "p#1", pl); !errors.Is(err, partition.ErrFenced) {
		t.Fatalf("orders' fence under pricing's owner = %v, want ErrFenced", err)
	}
	_ = tx.Rollback()
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := orders.Fence(ctx, tx, "o#1", ol)
	if err != nil || cp.Available != 3 {
		t.Fatalf("orders' fence = %+v, %v", cp, err)
	}
	if err := orders.Advance(ctx, tx, ol, 0, 3, nil); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, pos := available("pricing", "acme"); pos != 0 {
		t.Fatalf("pricing acme position = %d after the orders' batch, want 0", pos)
	}
	if v, pos, err := orders.Admin().Progress(ctx, "acme"); err != nil || pos != 3 || v != ol.Version {
		t.Fatalf("orders' progress = v%d %d, %v", v, pos, err)
	}
	if rel, err := orders.Release(ctx, "o#1", []partition.Lease{ol}); err != nil || len(rel) != 1 {
		t.Fatalf("orders' release = %v, %v", rel, err)
	}
	// Pricing's lease is untouched by all that.
	if h, err := pricing.Inspect(ctx, "p#1", []partition.Lease{pl}); err != nil || len(h) != 1 {
		t.Fatalf("pricing's lease after the orders' release: %v, %v; want still held", h, err)
	}
	if h, err := orders.Inspect(ctx, "p#1", []partition.Lease{pl}); err != nil || len(h) != 0 {
		t.Fatalf("orders' inspect of pricing's lease: %v, %v; want nothing", h, err)
	}

	// Failures and retries stay within the kind.
	if _, err := orders.Fail(ctx, "p#1", pl, "boom", time.Second, time.Second, 1); !errors.Is(err, partition.ErrFenced) {
		t.Fatalf("orders' Fail of pricing's lease = %v, want ErrFenced", err)
	}
	if r, err := pricing.Fail(ctx, "p#1", pl, "boom", time.Second, time.Second, 1); err != nil || !r.Quarantined {
		t.Fatalf("pricing's Fail = %+v, %v", r, err)
	}
	if changed, err := orders.Admin().Retry(ctx, "acme"); err != nil || changed {
		t.Fatalf("orders' retry of acme = %v, %v; want nothing to do (its acme never failed)", changed, err)
	}
	if _, err := orders.Admin().Retry(ctx, "globex"); !errors.Is(err, partition.ErrNotFound) {
		t.Fatalf("orders' retry of globex = %v, want ErrNotFound (a pricing partition)", err)
	}
	if n, err := orders.QuarantinedCount(ctx); err != nil || n != 0 {
		t.Fatalf("orders' quarantined = %d, %v", n, err)
	}
	if n, err := pricing.QuarantinedCount(ctx); err != nil || n != 1 {
		t.Fatalf("pricing's quarantined = %d, %v", n, err)
	}

	// Status, history and the fair-share inputs are the kind's own.
	status := func(s *taskstore.Store) map[string]string {
		parts, _, err := s.Admin().Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, p := range parts {
			out[p.Key] = p.State
		}
		return out
	}
	if got := status(orders); len(got) != 2 || got["acme"] != partition.StateDone || got["initech"] != partition.StatePending {
		t.Fatalf("orders' status = %v", got)
	}
	if got := status(pricing); len(got) != 2 || got["acme"] != partition.StateQuarantined || got["globex"] != partition.StatePending {
		t.Fatalf("pricing's status = %v", got)
	}
	hist, err := orders.Admin().History(ctx, "acme", 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range hist {
		if e.Worker == "p#1" {
			t.Fatalf("orders' history of acme holds pricing's event %+v", e)
		}
	}
	if len(hist) != 2 {
		t.Fatalf("orders' history of acme = %+v; want its claim and release", hist)
	}
	if _, err := pricing.Heartbeat(ctx, taskstore.Worker{InstanceID: "p#1", Name: "p"}, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	if l, err := orders.FairShareLoad(ctx, "o#1", 8, time.Minute); err != nil || l.LiveWorkers != 1 || l.Busy != 1 || l.Unclaimed != 1 {
		t.Fatalf("orders' fair-share load = %+v, %v; want its own worker and initech only", l, err)
	}
	if l, err := pricing.ClusterLoad(ctx); err != nil || l.LiveWorkers != 1 || l.Busy != 1 || l.Quarantined != 1 {
		t.Fatalf("pricing's cluster load = %+v, %v; want its own worker, globex and the quarantined acme", l, err)
	}
}

// A kind must be usable in notifications and idempotency keys: no white
// space, control characters or "/", at most MaxKindLen bytes; a producer
// refuses any other.
func TestValidateKind(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"pricing", "orders.v2", "billing:eu-1", "ünïcode", strings.Repeat("k", partition.MaxKindLen)} {
		if err := partition.ValidateKind(k); err != nil {
			t.Errorf("ValidateKind(%q) = %v", k, err)
		}
	}
	for _, k := range []string{"", "two words", "tab\there", "a/b", "new\nline", strings.Repeat("k", partition.MaxKindLen+1), "\xff"} {
		if err := partition.ValidateKind(k); err == nil {
			t.Errorf("ValidateKind(%q) = nil, want an error", k)
		}
	}
	_, err := partition.NewStore(nil, "").Kind("a b").AddWorkTx(context.Background(), bun.Tx{}, "k", 1)
	if err == nil || !strings.Contains(err.Error(), "white space") {
		t.Errorf("AddWork with kind %q = %v, want refused", "a b", err)
	}
	if r, k := notify.Parse(notify.Payload(notify.Work, "orders")); r != notify.Work || k != "orders" {
		t.Errorf("ParsePayload(NotifyPayload(work, orders)) = %q, %q", r, k)
	}
	if r, k := notify.Parse("work"); r != "work" || k != "" {
		t.Errorf("ParsePayload(work) = %q, %q", r, k)
	}
}

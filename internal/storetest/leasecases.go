package storetest

import (
	"github.com/batonhq/baton/internal/leaseinfo"
	"slices"
	"strings"
	"time"

	"github.com/batonhq/baton/partition"
)

// slack is how much database time a lease case allows between a fixture
// and the statement it checks: far more than a busy machine takes, far
// less than the differences the cases look for.
const slack = TTL / 10

func renewedLeases(rs []leaseinfo.Renewal) []partition.Lease {
	out := make([]partition.Lease, len(rs))
	for i, r := range rs {
		out[i] = r.Lease
	}
	slices.SortFunc(out, func(a, b partition.Lease) int { return strings.Compare(a.Key, b.Key) })
	return out
}

func heldLeases(hs []leaseinfo.Owned) []partition.Lease {
	out := make([]partition.Lease, len(hs))
	for i, h := range hs {
		out[i] = h.Lease
	}
	slices.SortFunc(out, func(a, b partition.Lease) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// remaining is the time owner's lease l has left, by Inspect; ok is false
// when l is not owner's.
func (c *C) remaining(h LeaseHarness, owner string, l partition.Lease) (left time.Duration, ok bool) {
	hs, err := h.Inspect(c.Ctx, owner, []partition.Lease{l})
	c.must(err, "Inspect")
	if len(hs) == 0 {
		return 0, false
	}
	return hs[0].Remaining, true
}

// Renew renews only the leases the owner holds at the version it claimed:
// another owner's, one taken over since (version bumped) and one at a
// version never held are missing from the result, and their rows keep
// the time they had.
func leaseRenewHeld(c *C, h LeaseHarness) {
	a := h.AddLease("a", "w1", TTL/2)
	b := h.AddLease("b", "w2", TTL/2)
	lost := h.AddLease("c", "w1", TTL/2)
	h.TakeOver("c", "w2")
	rs, err := h.Renew(c.Ctx, "w1", []partition.Lease{lost, b, a, {Key: "a", Version: a.Version + 1}, {Key: "nope", Version: 1}})
	c.must(err, "Renew")
	if got := renewedLeases(rs); !slices.Equal(got, []partition.Lease{a}) {
		c.Fatalf("Renew = %v; want only %v", got, a)
	}
	if left, ok := c.remaining(h, "w1", a); !ok || left <= TTL-slack {
		c.Errorf("renewed lease has %v left (held %v); want about %v", left, ok, TTL)
	}
	if left, ok := c.remaining(h, "w2", b); !ok || left > TTL/2 {
		c.Errorf("another owner's lease has %v left (held %v) after w1's renewal; want at most %v, untouched", left, ok, TTL/2)
	}
}

// A renewal sets the lease to TTL from the database's now: whatever it had
// left, it has TTL left afterwards, less the time since.
func leaseRenewExtends(c *C, h LeaseHarness) {
	a := h.AddLease("a", "w1", slack)
	b := h.AddLease("b", "w1", 2*TTL) // more than a renewal gives: brought back to TTL
	rs, err := h.Renew(c.Ctx, "w1", []partition.Lease{b, a})
	c.must(err, "Renew")
	if got := renewedLeases(rs); !slices.Equal(got, []partition.Lease{a, b}) {
		c.Fatalf("Renew = %v; want %v and %v", got, a, b)
	}
	for _, l := range []partition.Lease{a, b} {
		if left, ok := c.remaining(h, "w1", l); !ok || left <= TTL-slack || left > TTL {
			c.Errorf("%v has %v left (held %v) after its renewal; want in (%v, %v]", l, left, ok, TTL-slack, TTL)
		}
	}
}

// A lease past its end that nobody took over is still its owner's: the
// version fences it, not the time. Renew renews it.
func leaseRenewExpired(c *C, h LeaseHarness) {
	a := h.AddLease("a", "w1", -time.Second)
	if left, ok := c.remaining(h, "w1", a); !ok || left != 0 {
		c.Fatalf("an expired lease not taken over: %v left (held %v); want held with 0 left", left, ok)
	}
	rs, err := h.Renew(c.Ctx, "w1", []partition.Lease{a})
	c.must(err, "Renew")
	if got := renewedLeases(rs); !slices.Equal(got, []partition.Lease{a}) {
		c.Fatalf("Renew = %v; want %v", got, a)
	}
	if left, _ := c.remaining(h, "w1", a); left <= TTL-slack {
		c.Errorf("renewed lease has %v left; want about %v", left, TTL)
	}
}

// A row that fails the table's Extra condition (a job's run past its
// deadline) is neither renewed nor reported held, though its owner and
// version match; a table without one renews it.
func leaseRenewExtra(c *C, h LeaseHarness) {
	a := h.AddLease("a", "w1", TTL/2)
	b := h.AddLease("b", "w1", TTL/2)
	want := []partition.Lease{b}
	if !h.BreakExtra("a") {
		want = []partition.Lease{a, b}
	}
	hs, err := h.Inspect(c.Ctx, "w1", []partition.Lease{a, b})
	c.must(err, "Inspect")
	if got := heldLeases(hs); !slices.Equal(got, want) {
		c.Errorf("Inspect = %v; want %v", got, want)
	}
	rs, err := h.Renew(c.Ctx, "w1", []partition.Lease{a, b})
	c.must(err, "Renew")
	if got := renewedLeases(rs); !slices.Equal(got, want) {
		c.Fatalf("Renew = %v; want %v", got, want)
	}
}

// Nothing to renew, or only leases lost: no renewal and no error.
func leaseRenewEmpty(c *C, h LeaseHarness) {
	rs, err := h.Renew(c.Ctx, "w1", nil)
	c.must(err, "Renew of nothing")
	if len(rs) != 0 {
		c.Errorf("Renew of nothing = %v; want none", rs)
	}
	a := h.AddLease("a", "w2", TTL/2)
	rs, err = h.Renew(c.Ctx, "w1", []partition.Lease{a})
	c.must(err, "Renew of another owner's lease")
	if len(rs) != 0 {
		c.Errorf("Renew of another owner's lease = %v; want none", rs)
	}
}

// Inspect reports the time a lease has left on the database clock, and
// changes nothing: a lease re-read keeps the end it had.
func leaseInspect(c *C, h LeaseHarness) {
	a := h.AddLease("a", "w1", TTL/2)
	b := h.AddLease("b", "w1", -time.Second)
	hs, err := h.Inspect(c.Ctx, "w1", []partition.Lease{b, a})
	c.must(err, "Inspect")
	if got := heldLeases(hs); !slices.Equal(got, []partition.Lease{a, b}) {
		c.Fatalf("Inspect = %v; want %v and %v", got, a, b)
	}
	for _, x := range hs {
		switch {
		case x.Key == "a" && (x.Remaining <= TTL/2-slack || x.Remaining > TTL/2):
			c.Errorf("%v has %v left; want in (%v, %v]", x.Lease, x.Remaining, TTL/2-slack, TTL/2)
		case x.Key == "b" && x.Remaining != 0:
			c.Errorf("expired %v has %v left; want 0", x.Lease, x.Remaining)
		}
	}
	if left, _ := c.remaining(h, "w1", a); left > TTL/2 {
		c.Errorf("%v has %v left when re-read again; want at most %v (not renewed)", a, left, TTL/2)
	}
}

// Inspect reports only the leases the owner holds at the version it
// claimed.
func leaseInspectHeld(c *C, h LeaseHarness) {
	a := h.AddLease("a", "w1", TTL/2)
	b := h.AddLease("b", "w2", TTL/2)
	lost := h.AddLease("c", "w1", TTL/2)
	h.TakeOver("c", "w2")
	hs, err := h.Inspect(c.Ctx, "w1", []partition.Lease{lost, b, a, {Key: "a", Version: a.Version - 1}})
	c.must(err, "Inspect")
	if got := heldLeases(hs); !slices.Equal(got, []partition.Lease{a}) {
		c.Errorf("Inspect = %v; want only %v", got, a)
	}
}

// Nothing to re-read: none held and no error.
func leaseInspectEmpty(c *C, h LeaseHarness) {
	hs, err := h.Inspect(c.Ctx, "w1", nil)
	c.must(err, "Inspect of nothing")
	if len(hs) != 0 {
		c.Errorf("Inspect of nothing = %v; want none", hs)
	}
}

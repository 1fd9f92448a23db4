package sim

import "testing"

// With ClaimWithBatch, unowned partitions are claimed with their first
// batch in the model too, under every fault, and the invariants hold; with
// it off, no claim is made that way.
func TestClaimWithBatchSchedules(t *testing.T) {
	t.Parallel()
	base := baseSeed(t)
	var with, claims, takeovers int
	for i := int64(0); i < 60; i++ {
		seed := base + i
		for _, on := range []bool{true, false} {
			c := RandomConfig(seed)
			c.AdvanceCAS = true
			c.ClaimWithBatch = on
			r := Run(c)
			if r.Violation != nil {
				t.Fatalf("claim-with-batch=%v: %v\nreplay with BATON_SEED=%d", on, r.Violation, seed)
			}
			if !on && r.ClaimsWithBatch != 0 {
				t.Fatalf("seed %d: %d claims with a batch while ClaimWithBatch is off", seed, r.ClaimsWithBatch)
			}
			if on {
				with += r.ClaimsWithBatch
				claims += r.Claims
				takeovers += r.Takeover
			}
		}
	}
	if with == 0 || with == claims {
		t.Fatalf("%d of %d claims made with their first batch (%d takeovers); want some, and not all", with, claims, takeovers)
	}
	t.Logf("%d of %d claims made with their first batch; %d takeovers", with, claims, takeovers)
}

package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/batonhq/baton/pricing/pricer"
)

// summary verifies the pricing demo's output against the independent
// recomputation and writes the summary: what was priced, how fast, the
// crash and its takeovers. It fails if verification does.
func summary(ctx context.Context, o PricingOptions, env *env, total int64, elapsed time.Duration, k kill, wall time.Duration) error {
	out := o.Stdout
	sum, err := pricer.NewStore(env.db, o.Schema.Schema).Verify(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "summary")
	fmt.Fprintf(out, "  contracts           %d\n", sum.Contracts)
	// priced's primary key (contract_id, seq) forbids pricing a record twice.
	fmt.Fprintf(out, "  records             %d accepted, %d priced\n", sum.Records, sum.Priced)
	fmt.Fprintf(out, "  gross / net         %s / %s minor units\n", sum.Gross, sum.Net)
	fmt.Fprintf(out, "  pricing time        %s (%.0f records/s with %d workers)\n", elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), o.Workers)
	switch t := k.taken; {
	case k.victim > 0 && t.Resumed > 0:
		fmt.Fprintf(out, "  crash               demo-%d SIGKILLed; %d of its contracts taken over, first batch by another worker\n", k.victim, t.Taken)
		fmt.Fprintf(out, "                      %s to %s after demo-%d's last heartbeat that renewed the lease (takeover time)\n",
			t.Min.Round(10*time.Millisecond), t.Max.Round(10*time.Millisecond), k.victim)
	case k.victim > 0:
		fmt.Fprintf(out, "  crash               demo-%d SIGKILLed; none of its contracts needed a takeover (it had released them)\n", k.victim)
	}
	fmt.Fprintf(out, "  demo wall time      %s\n", wall.Round(time.Millisecond))
	if len(sum.Mismatches) > 0 || sum.Priced != sum.Records {
		for _, m := range sum.Mismatches {
			fmt.Fprintln(out, "  MISMATCH", m.Description)
		}
		return fmt.Errorf("verification failed: %d contracts disagree with the independent recomputation", len(sum.Mismatches))
	}
	fmt.Fprintf(out, "  verification        OK: for all %d contracts the per-record nets add up to the contract net\n", sum.Contracts)
	fmt.Fprintln(out, "                      recomputed independently in SQL, and every record was priced exactly once")
	return nil
}

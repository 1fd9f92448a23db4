package schedule_test

import (
	"context"
	"fmt"
	"time"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/schedule"
)

// A service registers a job that runs every night at two; an operator
// asks for a run now, which one scheduler of the farm carries out, once.
func Example() {
	db, done := pgtest.ExampleDB() // a database with baton's schema applied
	defer done()

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	s, err := schedule.New(db, schedule.Config{
		// Stop once the run is over, to end the example.
		OnRun: func(job, outcome string, _ time.Duration) {
			fmt.Printf("%s: %s\n", job, outcome)
			stop()
		},
	})
	if err != nil {
		panic(err)
	}
	err = s.Register(ctx, schedule.Job{
		Definition: schedule.Definition{Name: "nightly-report", Cron: "0 2 * * *"},
		Run: func(ctx context.Context, r *schedule.Run) error {
			fmt.Printf("running %s (triggered: %v, fence %d)\n", r.Job, r.Triggered, r.Fence)
			return nil
		},
	})
	if err != nil {
		panic(err)
	}
	if _, err := schedule.NewStore(db, "").Trigger(ctx, "nightly-report"); err != nil {
		panic(err)
	}
	if err := s.Run(ctx); err != nil {
		panic(err)
	}

	jobs, err := schedule.NewStore(db, "").List(context.Background())
	if err != nil {
		panic(err)
	}
	for _, j := range jobs {
		fmt.Printf("%s %s: %d run(s), last %s\n", j.Name, j.Schedule, j.Runs, j.LastResult)
	}
	// Output:
	// running nightly-report (triggered: true, fence 1)
	// nightly-report: ok
	// nightly-report cron 0 2 * * *: 1 run(s), last ok
}

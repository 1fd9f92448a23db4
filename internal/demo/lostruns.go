package demo

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"
)

// Lost is what workers' JSON logs say they could not finish: a run stopped
// because its lease was lost (event job_lost), or whose completion was not
// recorded (job_fenced). The scheduler runs such a slot again and moves
// such a job to another worker, by design: a worker starved of CPU for
// longer than the lease loses it as a stopped one does. The checks excuse
// a repeat or a move only with such a line from the worker that lost it.
type Lost struct {
	// Runs are the runs lost: job -> slot and the worker that lost it.
	Runs map[string]map[JobRun]bool
	// Workers are the workers that lost a job's lease: job -> worker.
	Workers map[string]map[string]bool
}

// ReadLog adds what worker's JSON log r reports lost.
func (l *Lost) ReadLog(worker string, r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		var line struct {
			Event, Job, Slot string
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue // a line of the job's own output, or a panic
		}
		if line.Event != "job_lost" && line.Event != "job_fenced" || line.Job == "" {
			continue
		}
		if l.Workers == nil {
			l.Workers, l.Runs = map[string]map[string]bool{}, map[string]map[JobRun]bool{}
		}
		if l.Workers[line.Job] == nil {
			l.Workers[line.Job], l.Runs[line.Job] = map[string]bool{}, map[JobRun]bool{}
		}
		l.Workers[line.Job][worker] = true
		if line.Slot == "" {
			continue // lost while held between runs: no slot
		}
		slot, err := time.Parse(time.RFC3339Nano, line.Slot)
		if err != nil {
			return fmt.Errorf("log of worker %s, line %d: slot %q: %w", worker, n, line.Slot, err)
		}
		l.Runs[line.Job][JobRun{slot.UTC(), worker}] = true
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the log of worker %s: %w", worker, err)
	}
	return nil
}

// readFile is ReadLog of the file at path.
func (l *Lost) readFile(worker, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("reading the log of worker %s: %w", worker, err)
	}
	defer f.Close()
	return l.ReadLog(worker, f)
}

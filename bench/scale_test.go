package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestScaleConfigValidate(t *testing.T) {
	var c scaleConfig
	c.flags(flag.NewFlagSet("bench", flag.ContinueOnError))
	if err := c.validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	cases := []struct {
		change func(*scaleConfig)
		want   string
	}{
		{func(c *scaleConfig) { c.records = 1_000_500 }, "-scale-records 1000500: want a multiple of -scale-records-per-contract (1000)"},
		{func(c *scaleConfig) { c.records = 0 }, "-scale-records 0: want a positive number"},
		{func(c *scaleConfig) { c.baseline = -1 }, "-scale-baseline -1: want a positive number"},
		{func(c *scaleConfig) { c.perContract = 0 }, "-scale-records-per-contract 0"},
		{func(c *scaleConfig) { c.storageRecords = 5_000_000 }, "-scale-storage-records 5000000: want the size of one of the runs"},
		{func(c *scaleConfig) { c.timeout = 0 }, "-scale-stage-timeout"},
	}
	for _, tc := range cases {
		c2 := c
		tc.change(&c2)
		err := c2.validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error containing %q", err, tc.want)
		}
	}
	// No baseline is allowed.
	c2 := c
	c2.baseline, c2.storageRecords = 0, 0
	if err := c2.validate(); err != nil {
		t.Errorf("no baseline: %v", err)
	}
}

func TestScaleDiskNeed(t *testing.T) {
	// 10^8 records at the defaults: the CSV, the database and a third
	// more, the WAL margin.
	got := scaleDiskNeed(100_000_000, 0, 0, true)
	want := int64(100_000_000*defaultCSVPerRecord + 100_000_000*defaultDBPerRecord*4/3 + diskMargin)
	if got != want {
		t.Fatalf("need %d, want %d", got, want)
	}
	if g := gib(got); g != "31.9 GiB" {
		t.Errorf("need %s", g)
	}
	// With DATABASE_URL only the CSV is on the local disk.
	if got := scaleDiskNeed(1000, 300, 30, false); got != 30_000 {
		t.Errorf("CSV only: %d", got)
	}
	d := diskCheck{Path: "/scratch", FreeBytes: 10 << 30, NeededBytes: 30 << 30, Server: true, DBPerRecord: 200}
	err := d.enough(100_000_000)
	if err == nil || !strings.Contains(err.Error(), "not enough disk space for 100000000 records: 10.0 GiB free in /scratch, about 30.0 GiB needed") {
		t.Fatalf("got %v", err)
	}
	d.FreeBytes = 31 << 30
	if err := d.enough(100_000_000); err != nil {
		t.Fatal(err)
	}
}

func TestLineCounter(t *testing.T) {
	var c lineCounter
	for _, s := range []string{"a,b\n1,", "2\n3,4", "\n"} {
		if n, err := c.Write([]byte(s)); err != nil || n != len(s) {
			t.Fatal(n, err)
		}
	}
	if c.lines != 3 || c.bytes != 12 {
		t.Fatalf("%d lines, %d bytes", c.lines, c.bytes)
	}
}

func TestSpreadAndCount(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
	if got := strings.Join(spread(ids, 3), ""); got != "adg" {
		t.Errorf("spread 3: %s", got)
	}
	if got := len(spread(ids, 50)); got != 10 {
		t.Errorf("spread 50: %d", got)
	}
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 100_000_000: "100,000,000", 1_234_567: "1,234,567"} {
		if got := count(n); got != want {
			t.Errorf("count(%d) = %s", n, got)
		}
	}
	if got := bytesPerRecord(2000, 0); got != 0 {
		t.Errorf("no records: %v", got)
	}
}

// A stage process's time, CPU and peak RSS come from its own rusage; a
// failure names the command and shows its log's tail.
func TestRunOneMeasuresTheProcess(t *testing.T) {
	sh, err := os.Stat("/bin/sh")
	if err != nil || sh.IsDir() {
		t.Skip("no /bin/sh")
	}
	dir := t.TempDir()
	e := &env{workerBin: "/bin/sh", tmp: dir}
	// The child fills about 64 MiB of memory before exiting.
	var p stageProc
	err = e.runOne(context.Background(), "postgres://u:secret@h/db", filepath.Join(dir, "ok.log"),
		stageSpec{id: "fill", args: []string{"-c", `x=$(head -c 67108864 /dev/zero | tr '\0' a); echo ${#x}`}}, &p)
	if err != nil {
		t.Fatal(err)
	}
	if p.PeakRSS < 64<<20 || p.Seconds <= 0 {
		t.Errorf("peak RSS %d, %.3fs: want the child's ≥ 64 MiB", p.PeakRSS, p.Seconds)
	}
	err = e.runOne(context.Background(), "postgres://u:secret@h/db", filepath.Join(dir, "bad.log"),
		stageSpec{id: "w1", args: []string{"-c", "echo broken input >&2; exit 3"}}, &p)
	if err == nil || !strings.Contains(err.Error(), "worker -c (w1): exit status 3") || !strings.Contains(err.Error(), "broken input") {
		t.Fatalf("got %v", err)
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("the database password is in the error: %v", err)
	}
	// A stage that outlives its timeout is ended and says so.
	_, _, err = e.runStage(context.Background(), 200*time.Millisecond, "postgres://h/db", dir, &results{},
		[]stageSpec{{id: "slow", args: []string{"-c", "exec sleep 30"}}})
	if err == nil || !strings.Contains(err.Error(), "not finished within 200ms") {
		t.Fatalf("got %v", err)
	}
}

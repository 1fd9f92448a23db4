package main

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/clienv"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/pricingschema"
)

// A load whose commit the server stops waiting for the synchronous
// standby to confirm (the standby is down; the wait is cancelled, as an
// HA manager's wait_primary does, or the session is terminated) is
// committed on the primary only: worker load says so, names the load and
// how to check it, and exits 6, not 0. status --load tells whether it is
// present.
func TestLoadNotConfirmedByStandbyExits6(t *testing.T) {
	rep := pgtest.StartSyncRep(t, pricingschema.Set)
	c := cli{t: t, dsn: rep.URL()}
	for _, tc := range []struct {
		name      string
		terminate bool
		loadID    string
	}{
		{"cancelled wait", false, "1"},
		{"terminated session", true, "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.t = t
			records := writeFile(t, "records.csv", "contract_id,record_id,amount_minor\nacme,a"+tc.loadID+",6000\n")
			tiers := writeFile(t, "tiers.csv", "contract_id,threshold_minor,discount_bp\nacme,0,0\n")
			cmd := c.command("load", "--tiers", tiers, "--records", records)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pid := rep.WaitingAtCommit(t, "baton-load")
			rep.Cancel(t, pid, tc.terminate)
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != clienv.ExitNotReplicated {
				t.Fatalf("worker load: %v, want exit %d\nstdout: %s\nstderr: %s", err, clienv.ExitNotReplicated, out.String(), errb.String())
			}
			for _, want := range []string{
				"load " + tc.loadID + " committed on the primary, but the synchronous standby did not confirm it",
				"may not survive a failover",
				"worker status --loads",
			} {
				if !strings.Contains(errb.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, errb.String())
				}
			}
			if tc.terminate && !strings.Contains(errb.String(), "the server then ended the session") {
				t.Errorf("stderr does not say the session ended:\n%s", errb.String())
			}
			if !tc.terminate && !strings.Contains(out.String(), "load "+tc.loadID+": ") {
				t.Errorf("stdout lacks the load's summary:\n%s", out.String())
			}
			// Committed on the primary: status finds it there.
			if got := c.mustRun("status", "--load", tc.loadID); !strings.Contains(got, tc.loadID+"  ") {
				t.Errorf("status --load %s does not list it:\n%s", tc.loadID, got)
			}
		})
	}
	c.t = t
	out, errs, code := c.run("status", "--load", "99")
	if code != clienv.ExitNotFound || !strings.Contains(errs, "load 99 not present") || !strings.Contains(out, "NOT PRESENT") {
		t.Errorf("status --load 99: exit %d, want %d\nstdout: %s\nstderr: %s", code, clienv.ExitNotFound, out, errs)
	}
}

// On a server whose commits wait for no standby (the test server), a load
// with --confirm-standby commits and exits 6, naming the setting; without
// it the same load exits 0.
func TestLoadConfirmStandbyExits6WithoutOne(t *testing.T) {
	c := cli{t: t, dsn: pgtest.NewURL(t)}
	tiers := writeFile(t, "tiers.csv", "contract_id,threshold_minor,discount_bp\nacme,0,0\n")
	records := writeFile(t, "records.csv", "contract_id,record_id,amount_minor\nacme,a1,6000\n")
	out, errs, code := c.run("load", "--tiers", tiers, "--records", records, "--confirm-standby")
	if code != clienv.ExitNotReplicated {
		t.Fatalf("load --confirm-standby: exit %d, want %d\nstdout: %s\nstderr: %s", code, clienv.ExitNotReplicated, out, errs)
	}
	for _, want := range []string{
		"load 1 committed on the primary, but it is not known to have waited for a synchronous standby (after its commit, synchronous_standby_names is empty)",
		"worker status --loads",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	if !strings.Contains(out, "load 1: ") {
		t.Errorf("stdout lacks the load's summary:\n%s", out)
	}
	records2 := writeFile(t, "records.csv", "contract_id,record_id,amount_minor\nacme,a2,6000\n")
	if out, errs, code := c.run("load", "--records", records2); code != 0 {
		t.Fatalf("load without --confirm-standby: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
}

// Package deploy holds what runs baton beside it: Prometheus alert rules
// (prometheus/) and an autoscaling example (keda/). Its test checks them.
package deploy

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// promtool is Prometheus's own checker: CI installs it (Debian's
// prometheus package); elsewhere the test skips without it.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is missing (apt-get install prometheus): CI checks the alert rules with it")
		}
		t.Skip("promtool not installed (apt-get install prometheus)")
	}
	return path
}

// The rules are valid and their unit tests (baton-alerts.test.yml) pass.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "baton-alerts.yml"},
		{"test", "rules", "baton-alerts.test.yml"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// Every baton metric the rules and the autoscaling example read is one
// the workers serve (docs/metrics.md is generated from their registry),
// but the paused gauge that comes with pausing.
func TestDeployReadsServedMetrics(t *testing.T) {
	t.Parallel()
	served, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`baton_[a-z_]+\*?`)
	for _, file := range []string{"prometheus/baton-alerts.yml", "keda/scaledobject.yaml"} {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range name.FindAllString(string(text), -1) {
			if m == "baton_paused_partitions" || strings.HasSuffix(m, "*") {
				continue
			}
			if !strings.Contains(string(served), "`"+m+"`") {
				t.Errorf("%s reads %s, which no worker serves (docs/metrics.md)", file, m)
			}
		}
	}
}

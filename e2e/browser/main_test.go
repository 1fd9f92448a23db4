package browser

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/pricing/pricingschema"
)

// workerBin is the worker binary built once for the package.
var workerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "baton-browser-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if workerBin, err = testutil.BuildWorker(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := pgtest.Run(m, pricingschema.Set)
	os.RemoveAll(dir)
	os.Exit(code)
}

const vectors = "../../testdata/vectors/"

// cli runs the worker binary against one database.
type cli struct {
	t   *testing.T
	dsn string
}

func (c cli) command(args ...string) *exec.Cmd {
	cmd := exec.Command(workerBin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+c.dsn)
	return cmd
}

// mustRun runs the worker to completion, fails the test unless it exits 0,
// and returns its standard output.
func (c cli) mustRun(args ...string) string {
	c.t.Helper()
	cmd := c.command(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		c.t.Fatalf("worker %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

package buildinfo

import (
	"runtime"
	"strings"
	"testing"
)

// The version names the command, a commit and the platform.
func TestVersion(t *testing.T) {
	t.Parallel()
	v := Version("worker")
	if !strings.HasPrefix(v, "worker ") || !strings.Contains(v, "\ncommit ") || !strings.HasSuffix(v, runtime.GOOS+"/"+runtime.GOARCH+"\n") {
		t.Fatalf("version:\n%s", v)
	}
}

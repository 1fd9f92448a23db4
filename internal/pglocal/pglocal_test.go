package pglocal

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// Without server binaries, the error says how to install them.
func TestMissingBinariesSayHowToInstall(t *testing.T) {
	t.Setenv("PG_BINDIR", t.TempDir())
	_, err := Start(context.Background(), Options{Dir: t.TempDir()})
	if !errors.Is(err, ErrNoBinaries) {
		t.Fatalf("Start without binaries = %v, want ErrNoBinaries", err)
	}
	for _, want := range []string{"apt-get install", "DATABASE_URL", "PG_BINDIR"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
}

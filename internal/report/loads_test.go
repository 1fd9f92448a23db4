package report

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/batonhq/baton/partition"
)

// Loads asked for but not present are a not-found error naming them.
func TestMissingLoadsError(t *testing.T) {
	t.Parallel()
	if err := (Status{}).MissingLoadsError(); err != nil {
		t.Errorf("no missing loads: %v", err)
	}
	err := Status{MissingLoads: []int64{7, 9}}.MissingLoadsError()
	if !errors.Is(err, partition.ErrNotFound) || !strings.HasPrefix(err.Error(), "2 loads 7, 9 not present") {
		t.Errorf("MissingLoadsError = %v", err)
	}
	if err := (Status{MissingLoads: []int64{99}}).MissingLoadsError(); !strings.HasPrefix(err.Error(), "1 load 99 not present") {
		t.Errorf("one missing load: %v", err)
	}
}

func TestWriteJSONIndents(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := WriteJSON(&b, map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	if b.String() != "{\n  \"a\": 1\n}\n" {
		t.Errorf("WriteJSON wrote %q", b.String())
	}
}

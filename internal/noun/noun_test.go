package noun

import "testing"

func TestCount(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n    int64
		want string
	}{{0, "0 records"}, {1, "1 record"}, {2, "2 records"}, {-1, "-1 records"}} {
		if got := Count(c.n, "record", "records"); got != c.want {
			t.Errorf("Count(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	if got := Count(1, "contract is", "contracts are"); got != "1 contract is" {
		t.Errorf("Count(1) of an int = %q", got)
	}
}

package distributor

import "testing"

func TestSegmentSize(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pending int64
		live    int
		want    int64
	}{
		{"alone: SegmentRecords", 899_000, 1, 100_000},
		{"9 segments over 2 workers become 10", 899_000, 2, 89_900},
		{"already a multiple", 799_000, 2, 100_000},
		{"45 over 2 become 46", 4_499_000, 2, 97_805},
		{"45 over 4 become 48", 4_499_000, 4, 93_730},
		{"more workers than segments: as it is", 250_000, 32, 100_000},
		{"live unknown", 899_000, 0, 100_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := segmentSize(tc.pending, 100_000, tc.live); got != tc.want {
				t.Fatalf("segmentSize(%d, 100000, %d) = %d, want %d", tc.pending, tc.live, got, tc.want)
			}
		})
	}
}

package partition

import (
	"fmt"
	"strconv"
	"strings"
)

// segmentDigits is how many digits a segment key gives its start, so that
// a partition's segments sort in order of their starts.
const segmentDigits = 19

// SegmentKey is the key of the segment of partition that starts after
// item start: the partition's key, "#" and start in 19 digits, so a
// partition's segments sort right after it and in order. Producers cannot
// add work under such a key (AddWork refuses it): a segment's items are
// fixed when it is split off (see distributor.Splitter).
func SegmentKey(partition string, start int64) string {
	return fmt.Sprintf("%s#%0*d", partition, segmentDigits, start)
}

// ParseSegmentKey reports whether key names a segment, and of which
// partition, starting after which item.
func ParseSegmentKey(key string) (partition string, start int64, ok bool) {
	i := strings.LastIndexByte(key, '#')
	if i <= 0 || len(key)-i-1 != segmentDigits {
		return "", 0, false
	}
	start, err := strconv.ParseInt(key[i+1:], 10, 64)
	if err != nil || start < 0 || key[i+1] == '+' || key[i+1] == '-' {
		return "", 0, false
	}
	return key[:i], start, true
}

// PartitionOf is the partition whose items key holds: key itself, or the
// partition key names a segment of.
func PartitionOf(key string) string {
	if p, _, ok := ParseSegmentKey(key); ok {
		return p
	}
	return key
}

func isSegmentKey(key string) bool {
	_, _, ok := ParseSegmentKey(key)
	return ok
}

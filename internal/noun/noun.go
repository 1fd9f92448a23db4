// Package noun words counts for people: "1 record", "2 records".
package noun

import "fmt"

// Count is n with the noun that goes with it: one for 1, many otherwise.
func Count[N ~int | ~int64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

package report

import (
	"encoding/json"
	"fmt"
	"io"
)

// WriteJSON writes v as indented JSON, the shape of the commands' --json
// output.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}

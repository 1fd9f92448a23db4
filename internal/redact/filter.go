package redact

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// maxLine is the most Filter holds back waiting for the end of a line.
const maxLine = 64 << 10

// Filter copies in to out through r, a line at a time so that no secret
// is split between two writes; a line that has not ended when the input
// pauses waits for its end (or for maxLine bytes, or the end of input).
func Filter(out io.Writer, in io.Reader, r *Redactor) error {
	br := bufio.NewReaderSize(in, maxLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if _, werr := io.WriteString(out, r.String(string(line))); werr != nil {
				return fmt.Errorf("writing standard error: %w", werr)
			}
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			return nil
		default:
			return fmt.Errorf("reading standard error: %w", err)
		}
	}
}

package export

import (
	"bufio"
	"context"
	"fmt"
	"io"

	"github.com/batonhq/baton/pricing/pricer"
)

// Options say what Export writes, and where.
type Options struct {
	// Out is the file to write (replaced atomically, see ToFile), or "-"
	// for Stdout.
	Out    string
	Stdout io.Writer
	// Previous writes, for each re-priced contract, the output its
	// current generation replaced (WritePrevious) instead of the current
	// output.
	Previous bool
	// Preview writes, for each contract with a preview waiting for a
	// decision, the preview's output (WritePreview) instead of the current
	// output.
	Preview bool
	// Complete writes the current output only when pricing is complete
	// (WriteComplete): otherwise nothing, and an error wrapping
	// ErrIncomplete.
	Complete bool
}

// Result is what an Export wrote, and what it left out.
type Result struct {
	Rows int64
	// Progress is the pricing progress checked before a plain export (not
	// Previous, Preview or Complete): its unpriced records and inconsistent
	// contracts were left out.
	Progress pricer.Progress
}

// Export writes the priced records as o says: the whole of "worker
// export".
func (s *Store) Export(ctx context.Context, o Options) (Result, error) {
	var res Result
	write := func(w io.Writer) (int64, error) { return s.Write(ctx, w) }
	switch {
	case o.Previous:
		write = func(w io.Writer) (int64, error) { return s.WritePrevious(ctx, w) }
	case o.Preview:
		write = func(w io.Writer) (int64, error) { return s.WritePreview(ctx, w) }
	case o.Complete:
		// One snapshot: checked complete, then written.
		write = func(w io.Writer) (int64, error) { return s.WriteComplete(ctx, w) }
	default:
		var err error
		if res.Progress, err = pricer.NewStore(s.t.DB, s.t.Schema).CheckProgress(ctx); err != nil {
			return res, err
		}
	}
	var err error
	res.Rows, err = ToPath(o.Out, o.Stdout, write)
	return res, err
}

// ToPath is ToFile for a path that may be "-" (or empty): write then
// writes to stdout, buffered.
func ToPath(path string, stdout io.Writer, write func(io.Writer) (int64, error)) (int64, error) {
	if path != "-" && path != "" {
		return ToFile(path, write)
	}
	w := bufio.NewWriterSize(stdout, 1<<16)
	n, err := write(w)
	if err != nil {
		return n, err
	}
	if err := w.Flush(); err != nil {
		return n, fmt.Errorf("writing to standard output: %w", err)
	}
	return n, nil
}

// WriteSummary writes to w what an export to out did and left out: how
// many records went to a file, then a warning for unpriced records and one
// per inconsistent contract.
func (r Result) WriteSummary(w io.Writer, out string) {
	if out != "-" {
		fmt.Fprintf(w, "exported %d priced records to %s\n", r.Rows, out)
	}
	if r.Progress.Unpriced > 0 {
		fmt.Fprintf(w, "warning: %d records are not priced yet and were not exported (--complete fails instead)\n", r.Progress.Unpriced)
	}
	for _, c := range r.Progress.Inconsistent {
		fmt.Fprintf(w, "warning: %s; its records beyond the checkpoint may be missing (--complete fails instead)\n", c)
	}
}

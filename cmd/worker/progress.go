package main

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// progress draws a one-line counter on a terminal and stays silent
// otherwise (logs and pipes get the final summary only).
type progress struct {
	w     io.Writer
	label string
	tty   bool
	mu    sync.Mutex
	shown bool
}

func newProgress(w io.Writer, label string) *progress {
	return &progress{w: w, label: label, tty: isTerminal(w)}
}

func (p *progress) update(stage string, rows int64) {
	if p == nil || !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "\r\033[K%s %s: %d rows", p.label, stage, rows)
	p.shown = true
}

func (p *progress) done() {
	if p == nil || !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

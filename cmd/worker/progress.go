package main

import (
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/term"
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

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// terminalRows is the height of w's terminal, or 0 if unknown.
func terminalRows(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	_, rows, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return rows
}

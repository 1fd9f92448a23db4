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
	switch stage {
	case "tiers", "records":
		fmt.Fprintf(p.w, "\r\033[K%s: reading %s: %d rows", p.label, stage, rows)
	default:
		fmt.Fprintf(p.w, "\r\033[K%s: %s (%d rows read)", p.label, stage, rows)
	}
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
	f, ok := file(w)
	return ok && term.IsTerminal(int(f.Fd()))
}

// file returns the file behind w, looking through wrapping writers such as
// the redacting one.
func file(w io.Writer) (*os.File, bool) {
	for {
		switch x := w.(type) {
		case *os.File:
			return x, true
		case interface{ Unwrap() io.Writer }:
			w = x.Unwrap()
		default:
			return nil, false
		}
	}
}

// terminalSize is the width and height of w's terminal, or zeros if
// unknown.
func terminalSize(w io.Writer) (int, int) {
	f, ok := file(w)
	if !ok {
		return 0, 0
	}
	cols, rows, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0, 0
	}
	return cols, rows
}

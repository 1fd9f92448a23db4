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
	line  *termLine
	label string
	tty   bool
}

// newProgress draws on w, which should be the command's standard error
// (globals.stderr, a *termLine), so that what else is written there ends
// the progress line first instead of running on from it.
func newProgress(w io.Writer, label string) *progress {
	line, ok := w.(*termLine)
	if !ok {
		line = &termLine{w: w}
	}
	return &progress{line: line, label: label, tty: isTerminal(w)}
}

func (p *progress) update(stage string, rows int64) {
	if p == nil || !p.tty {
		return
	}
	switch stage {
	case "tiers", "records":
		p.line.draw(fmt.Sprintf("%s: reading %s: %d rows", p.label, stage, rows))
	default:
		p.line.draw(fmt.Sprintf("%s: %s (%d rows read)", p.label, stage, rows))
	}
}

// done clears the progress line, for the summary that follows.
func (p *progress) done() {
	if p != nil && p.tty {
		p.line.clear()
	}
}

// end leaves the progress line as it is and ends it, so that what follows
// (why the command stopped) starts on a line of its own.
func (p *progress) end() {
	if p != nil && p.tty {
		p.line.end()
	}
}

// termLine is a command's standard error, shared by a progress line and
// everything else written there (logs, warnings): a write while the
// progress line is drawn ends that line first, so that nothing is glued to
// it.
type termLine struct {
	mu   sync.Mutex
	w    io.Writer
	open bool // a progress line is drawn and not yet ended or cleared
}

func (t *termLine) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open {
		t.open = false
		if _, err := io.WriteString(t.w, "\n"); err != nil {
			return 0, err
		}
	}
	return t.w.Write(p)
}

// Unwrap returns the writer written to (to ask whether it is a terminal).
func (t *termLine) Unwrap() io.Writer { return t.w }

// draw replaces the progress line with s.
func (t *termLine) draw(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, _ = io.WriteString(t.w, "\r\033[K"+s)
	t.open = true
}

// clear erases the progress line, if one is drawn.
func (t *termLine) clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open {
		t.open = false
		_, _ = io.WriteString(t.w, "\r\033[K")
	}
}

// end ends the progress line, if one is drawn, keeping it on screen.
func (t *termLine) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open {
		t.open = false
		_, _ = io.WriteString(t.w, "\n")
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

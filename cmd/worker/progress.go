package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// progress draws a one-line counter on a terminal and stays silent
// otherwise (logs and pipes get the final summary only).
type progress struct {
	line  *termLine
	label string
	tty   bool
	start time.Time
	now   func() time.Time
}

// newProgress draws on w, which should be the command's standard error
// (globals.stderr, a *termLine), so that what else is written there ends
// the progress line first instead of running on from it.
func newProgress(w io.Writer, label string) *progress {
	line, ok := w.(*termLine)
	if !ok {
		line = &termLine{w: w}
	}
	return &progress{line: line, label: label, tty: isTerminal(w), start: time.Now(), now: time.Now}
}

// newLoadProgress is newProgress for a load, which also stays silent when
// the logs are JSON: whoever reads them is a program.
func newLoadProgress(w io.Writer, label, logFormat string) *progress {
	p := newProgress(w, label)
	p.tty = showProgress(p.tty, logFormat)
	return p
}

// showProgress decides whether a progress line is drawn: only on a
// terminal, and not among JSON logs.
func showProgress(terminal bool, logFormat string) bool {
	return terminal && !strings.EqualFold(logFormat, "json")
}

// reading draws the progress of reading a records file: rows read, the
// rate, and with the file's size, the share read and the time left.
func (p *progress) reading(rows, read, size int64) {
	if p == nil || !p.tty {
		return
	}
	p.line.draw(readingLine(p.label, rows, read, size, p.now().Sub(p.start)))
}

// readingLine is the progress line of a file being read: rows read so
// far, rows/s since the start, and when the size is known the share of
// the bytes read and the time left at the rate so far.
func readingLine(label string, rows, read, size int64, elapsed time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: reading records: %s rows", label, thousands(rows))
	if size > 0 {
		fmt.Fprintf(&b, " (%d%%)", min(100, read*100/size))
	}
	if elapsed < time.Second || rows == 0 {
		return b.String()
	}
	fmt.Fprintf(&b, ", %s rows/s", thousands(int64(float64(rows)/elapsed.Seconds())))
	if size > 0 && read > 0 && read < size {
		left := time.Duration(float64(elapsed) * float64(size-read) / float64(read))
		fmt.Fprintf(&b, ", %s left", left.Round(time.Second))
	}
	return b.String()
}

// thousands writes n with commas between groups of three digits.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
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

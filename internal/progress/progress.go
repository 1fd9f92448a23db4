// Package progress draws a command's progress on a terminal: a one-line
// counter (Counter) that stays silent off a terminal, and the standard
// error (Line) that it shares with logs and warnings, so that what else is
// written there ends the progress line first instead of running on from it.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// Counter draws a one-line counter on a terminal and stays silent
// otherwise (logs and pipes get the final summary only).
type Counter struct {
	line  *Line
	label string
	tty   bool
	start time.Time
	now   func() time.Time
}

// New draws on w, which should be the command's standard error
// (a *Line, see NewLine), so that what else is written there ends
// the progress line first instead of running on from it.
func New(w io.Writer, label string) *Counter {
	line, ok := w.(*Line)
	if !ok {
		line = &Line{w: w}
	}
	return &Counter{line: line, label: label, tty: IsTerminal(w), start: time.Now(), now: time.Now}
}

// NewLoad is New for a load, which also stays silent when
// the logs are JSON: whoever reads them is a program.
func NewLoad(w io.Writer, label, logFormat string) *Counter {
	p := New(w, label)
	p.tty = Shown(p.tty, logFormat)
	return p
}

// Shown decides whether a progress line is drawn: only on a
// terminal, and not among JSON logs.
func Shown(terminal bool, logFormat string) bool {
	return terminal && !strings.EqualFold(logFormat, "json")
}

// Reading draws the progress of reading a records file: rows read, the
// rate, and with the file's size, the share read and the time left.
func (p *Counter) Reading(rows, read, size int64) {
	if p == nil || !p.tty {
		return
	}
	p.line.draw(ReadingLine(p.label, rows, read, size, p.now().Sub(p.start)))
}

// ReadingLine is the progress line of a file being read: rows read so
// far, rows/s since the start, and when the size is known the share of
// the bytes read and the time left at the rate so far.
func ReadingLine(label string, rows, read, size int64, elapsed time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: reading records: %s rows", label, Thousands(rows))
	if size > 0 {
		fmt.Fprintf(&b, " (%d%%)", min(100, read*100/size))
	}
	if elapsed < time.Second || rows == 0 {
		return b.String()
	}
	fmt.Fprintf(&b, ", %s rows/s", Thousands(int64(float64(rows)/elapsed.Seconds())))
	if size > 0 && read > 0 && read < size {
		left := time.Duration(float64(elapsed) * float64(size-read) / float64(read))
		fmt.Fprintf(&b, ", %s left", left.Round(time.Second))
	}
	return b.String()
}

// Thousands writes n with commas between groups of three digits.
func Thousands(n int64) string {
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

// Update draws the stage a load is in and the rows read so far (the
// shape of ingest.Options.Progress).
func (p *Counter) Update(stage string, rows int64) {
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

// Done clears the progress line, for the summary that follows.
func (p *Counter) Done() {
	if p != nil && p.tty {
		p.line.clear()
	}
}

// End leaves the progress line as it is and ends it, so that what follows
// (why the command stopped) starts on a line of its own.
func (p *Counter) End() {
	if p != nil && p.tty {
		p.line.end()
	}
}

// Line is a command's standard error, shared by a progress line and
// everything else written there (logs, warnings): a write while the
// progress line is drawn ends that line first, so that nothing is glued to
// it.
type Line struct {
	mu   sync.Mutex
	w    io.Writer
	open bool // a progress line is drawn and not yet ended or cleared
}

// NewLine returns w shared between a progress line and everything else.
func NewLine(w io.Writer) *Line { return &Line{w: w} }

func (t *Line) Write(p []byte) (int, error) {
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
func (t *Line) Unwrap() io.Writer { return t.w }

// draw replaces the progress line with s.
func (t *Line) draw(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, _ = io.WriteString(t.w, "\r\033[K"+s)
	t.open = true
}

// clear erases the progress line, if one is drawn.
func (t *Line) clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open {
		t.open = false
		_, _ = io.WriteString(t.w, "\r\033[K")
	}
}

// end ends the progress line, if one is drawn, keeping it on screen.
func (t *Line) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open {
		t.open = false
		_, _ = io.WriteString(t.w, "\n")
	}
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
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

// TerminalSize is the width and height of w's terminal, or zeros if
// unknown.
func TerminalSize(w io.Writer) (int, int) {
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

package console

import (
	"cmp"
	"fmt"
	"html/template"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// terms are the configured nouns as the pages use them.
type terms struct {
	Noun  string // one partition: "contract"
	Nouns string // more than one, and the list's path: "contracts"
	Unit  string // the work items: "records"
}

// NounTitle is Noun capitalised, for headings.
func (t terms) NounTitle() string { return upperFirst(t.Noun) }

// NounsTitle is Nouns capitalised, for headings.
func (t terms) NounsTitle() string { return upperFirst(t.Nouns) }

// Rate labels a rate of items: "records/s".
func (t terms) Rate() string { return t.Unit + "/s" }

// RowAttr names the data attribute carrying a row's key in the
// partitions table (data-contract): the noun's ASCII letters and digits,
// or "key" when it has none.
func (t terms) RowAttr() string {
	var b strings.Builder
	for _, r := range strings.ToLower(t.Noun) {
		if 'a' <= r && r <= 'z' || '0' <= r && r <= '9' {
			b.WriteRune(r)
		}
	}
	return cmp.Or(b.String(), "key")
}

// List is the path of the partitions table.
func (t terms) List() string { return "/" + t.Nouns }

// Path is the path of one partition's page.
func (t terms) Path(key string) string { return "/" + t.Nouns + "/" + url.PathEscape(key) }

func upperFirst(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}

// stamp renders a time as a date and a time of day that a narrow column
// may put on two lines but never breaks inside. Its text is digits and
// punctuation from the layouts only.
func stamp(t time.Time, clock string) template.HTML {
	u := t.UTC()
	return template.HTML(`<time datetime="` + u.Format(time.RFC3339Nano) + `"><span>` + u.Format("2006-01-02") +
		`</span> <span>` + u.Format(clock) + ` UTC</span></time>`)
}

var funcs = template.FuncMap{
	"ms":    fmtMS,
	"dur":   func(d *time.Duration) string { return fmtMSPtr(d) },
	"count": fmtCount,
	"rate":  func(f float64) string { return fmtCount(int64(f + 0.5)) },
	"pct":   func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
	"when": func(t time.Time) string {
		return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
	},
	"whenp": func(t *time.Time) string {
		if t == nil {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"i64": func(p *int64) string {
		if p == nil {
			return ""
		}
		return fmtCount(*p)
	},
	// signed writes a change (an int64 or a pointer to one) with its
	// sign: +1,200, −300, 0.
	"signed": func(v any) string {
		var n int64
		switch x := v.(type) {
		case *int64:
			n = *x
		case int64:
			n = x
		}
		switch {
		case n > 0:
			return "+" + fmtCount(n)
		case n < 0:
			return "−" + fmtCount(-n)
		}
		return "0"
	},
	"int": func(p *int) string {
		if p == nil {
			return ""
		}
		return strconv.Itoa(*p)
	},
	"agep": func(p *int64) string {
		if p == nil {
			return "—"
		}
		return fmtMS(*p)
	},
	// at and atp are when and whenp for table cells (see stamp).
	"at":    func(t time.Time) template.HTML { return stamp(t, "15:04:05.000") },
	"atsec": func(t time.Time) template.HTML { return stamp(t, "15:04:05") },
	"atp": func(t *time.Time) template.HTML {
		if t == nil {
			return "—"
		}
		return stamp(*t, "15:04:05")
	},
	// left renders a time left: "in 4.0 s", or "4.0 s ago" once past.
	"left": func(p *int64) string {
		switch {
		case p == nil:
			return "—"
		case *p < 0:
			return fmtMS(-*p) + " ago"
		}
		return "in " + fmtMS(*p)
	},
	"sev":   severity,
	"lower": strings.ToLower,
}

func fmtMSPtr(d *time.Duration) string {
	if d == nil {
		return ""
	}
	return fmtMS(d.Milliseconds())
}

// fmtMS renders milliseconds for people: 840 ms, 12.3 s, 4m05s.
func fmtMS(ms int64) string {
	switch {
	case ms < 1000:
		return fmt.Sprintf("%d ms", ms)
	case ms < 60_000:
		return fmt.Sprintf("%.1f s", float64(ms)/1000)
	default:
		return (time.Duration(ms) * time.Millisecond).Round(time.Second).String()
	}
}

// fmtCount renders an integer with thin thousands separators.
func fmtCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

var pageNames = []string{"overview", "partitions", "partition", "workers", "jobs", "error"}

func parsePages() (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/backlog.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("parsing console template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

package console

import (
	"fmt"
	"html/template"
	"strconv"
	"time"
)

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

var pageNames = []string{"overview", "contracts", "contract", "workers", "jobs", "error"}

func parsePages() (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("parsing console template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

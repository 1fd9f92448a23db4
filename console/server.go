package console

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/batonhq/baton/dbconn"

	"github.com/batonhq/baton/partition"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Server is a running console.
type Server struct {
	cfg   Config
	src   *source
	log   *slog.Logger
	pages map[string]*template.Template
	ln    net.Listener
	srv   *http.Server
	stop  chan struct{} // closed by Stop: ends event streams
	done  chan error
}

// New returns a console over db, listening on cfg.Addr, not yet serving.
func New(db *dbconn.DB, cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("invalid console config: %w", err)
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("listening for the console on %s: %w", cfg.Addr, err)
	}
	s := &Server{cfg: cfg, src: newSource(db, cfg), log: cfg.Logger, pages: pages, ln: ln,
		stop: make(chan struct{}), done: make(chan error, 1)}
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
	return s, nil
}

// Addr is the address the console listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// ActionsEnabled reports whether a token was configured.
func (s *Server) ActionsEnabled() bool { return s.cfg.Token != "" }

// Start serves in the background and returns at once.
func (s *Server) Start() {
	go func() {
		err := s.srv.Serve(s.ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
}

// Stop ends the event streams and shuts the server down, waiting briefly
// for requests in flight.
func (s *Server) Stop() {
	close(s.stop)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	<-s.done
}

// Run serves until ctx is cancelled.
func (s *Server) Run(ctx context.Context) error {
	s.Start()
	select {
	case <-ctx.Done():
		s.Stop()
		return nil
	case err := <-s.done:
		s.done <- err
		return err
	}
}

// Handler returns the console's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFiles, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", s.overviewPage)
	// The partitions live under their plural noun: /contracts for a
	// console configured with the noun contract.
	list := "/" + s.cfg.Nouns
	mux.HandleFunc("GET "+list, s.partitionsPage)
	mux.HandleFunc("GET "+list+"/{id}", s.partitionPage)
	mux.HandleFunc("POST "+list+"/{id}/retry", s.retry)
	mux.HandleFunc("POST "+list+"/{id}/pause", s.pause)
	mux.HandleFunc("POST "+list+"/{id}/resume", s.resume)
	mux.HandleFunc("POST /pause", s.pause) // the whole kind
	mux.HandleFunc("POST /resume", s.resume)
	mux.HandleFunc("GET /workers", s.workersPage)
	mux.HandleFunc("GET /jobs", s.jobsPage)
	mux.HandleFunc("POST /jobs/{name}/trigger", s.triggerJob)
	mux.HandleFunc("POST /jobs/trigger", s.triggerJob) // the job named in the form
	mux.HandleFunc("GET /events", s.events)
	mux.HandleFunc("GET /api/overview", s.overviewJSON)
	// Actions are POSTs carrying the token in the form; on top of that a
	// cross-origin POST (another site's form) is refused outright.
	return securityHeaders(http.NewCrossOriginProtection().Handler(mux))
}

func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}

// page is what every template gets.
type page struct {
	Title   string
	Nav     string
	Actions bool
	T       terms
	Snap    *snapshot
	Data    any
	Flash   string
	Error   string
}

func (s *Server) terms() terms {
	return terms{Noun: s.cfg.Noun, Nouns: s.cfg.Nouns, Unit: s.cfg.ItemUnit}
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	p.Actions = s.ActionsEnabled()
	p.T = s.terms()
	if p.Flash == "" {
		p.Flash = r.URL.Query().Get("flash")
	}
	t := s.pages[name]
	tmpl := "layout"
	if r.Header.Get("X-Fragment") == "1" {
		tmpl = "live" // the live region alone, for the refresh script
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if err := t.ExecuteTemplate(w, tmpl, p); err != nil {
		s.log.Warn("rendering console page", "page", name, "error", err)
	}
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	s.log.Warn("console request failed", "path", r.URL.Path, "error", err)
	s.render(w, r, status, "error", page{Title: "Error", Error: err.Error()})
}

func (s *Server) snapshot(w http.ResponseWriter, r *http.Request) (*snapshot, bool) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	snap, err := s.src.read(ctx)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, fmt.Errorf("reading the database: %w", err))
		return nil, false
	}
	return snap, true
}

func (s *Server) overviewPage(w http.ResponseWriter, r *http.Request) {
	snap, ok := s.snapshot(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	recent, err := s.src.notable(ctx, recentTakeovers, notableLimit)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	var previews []Preview
	if s.cfg.Previews != nil {
		if previews, err = s.cfg.Previews(ctx); err != nil {
			s.fail(w, r, http.StatusServiceUnavailable, fmt.Errorf("reading the previews: %w", err))
			return
		}
	}
	s.render(w, r, http.StatusOK, "overview", page{Title: "Overview", Nav: "overview", Snap: snap,
		Data: struct {
			States   []string
			Recent   []partition.HistoryEntry
			Previews []Preview
		}{states, recent, previews}})
}

// partitionsView is the partitions page's data.
type partitionsView struct {
	Query   query
	States  []string
	Rows    []part
	Matched int
	Limit   int
	Sorts   map[string]string // column → link that sorts by it
}

// sortName is how a sort key reads in URLs: the key column's is the
// noun (sort=contract), the others their own.
func (s *Server) sortName(key string) string {
	if key == "key" {
		return s.cfg.Noun
	}
	return key
}

func (s *Server) partitionsPage(w http.ResponseWriter, r *http.Request) {
	snap, ok := s.snapshot(w, r)
	if !ok {
		return
	}
	v := r.URL.Query()
	q := query{Q: strings.TrimSpace(v.Get("q")), State: v.Get("state"), Owner: v.Get("owner"),
		Sort: v.Get("sort"), Desc: v.Get("dir") == "desc"}
	if q.Sort == s.cfg.Noun {
		q.Sort = "key"
	}
	rows, n := q.apply(snap.Parts, tableLimit)
	sorts := map[string]string{}
	for col := range sortKeys {
		u := url.Values{}
		for k, vs := range v {
			u[k] = vs
		}
		u.Set("sort", s.sortName(col))
		u.Del("dir")
		if q.Sort == col && !q.Desc {
			u.Set("dir", "desc")
		}
		sorts[col] = "/" + s.cfg.Nouns + "?" + u.Encode()
	}
	q.Sort = s.sortName(q.Sort)
	s.render(w, r, http.StatusOK, "partitions", page{Title: s.terms().NounsTitle(), Nav: "partitions", Snap: snap,
		Data: partitionsView{Query: q, States: states, Rows: rows, Matched: n, Limit: tableLimit, Sorts: sorts}})
}

// partitionView is a partition's page data.
type partitionView struct {
	Part        part
	History     []partition.HistoryEntry
	Takeovers   []takeover      // newest first
	Generations []generationRow // newest first; none without Config.Generations
}

func (s *Server) partitionPage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	snap, ok := s.snapshot(w, r)
	if !ok {
		return
	}
	var c *part
	for i := range snap.Parts {
		if snap.Parts[i].Key == id {
			c = &snap.Parts[i]
		}
	}
	if c == nil {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("no %s %q", s.cfg.Noun, id))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	hist, err := s.src.store.History(ctx, id, historyLimit)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	var gens []Generation
	if s.cfg.Generations != nil {
		if gens, err = s.cfg.Generations(ctx, id); err != nil {
			s.fail(w, r, http.StatusServiceUnavailable, fmt.Errorf("reading the generations of %s %s: %w", s.cfg.Noun, id, err))
			return
		}
	}
	s.render(w, r, http.StatusOK, "partition", page{Title: s.terms().NounTitle() + " " + id, Nav: "partitions", Snap: snap,
		Data: partitionView{Part: *c, History: hist, Takeovers: takeovers(hist, c.Version, c.OwnerInstance), Generations: generationRows(gens)}})
}

func (s *Server) workersPage(w http.ResponseWriter, r *http.Request) {
	snap, ok := s.snapshot(w, r)
	if !ok {
		return
	}
	rows := snap.Workers
	if len(rows) > tableLimit {
		rows = rows[:tableLimit]
	}
	s.render(w, r, http.StatusOK, "workers", page{Title: "Workers", Nav: "workers", Snap: snap,
		Data: struct {
			Rows  []worker
			Total int
		}{rows, len(snap.Workers)}})
}

func (s *Server) jobsPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	jobs, err := s.src.jobs(ctx)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	s.render(w, r, http.StatusOK, "jobs", page{Title: "Scheduled jobs", Nav: "jobs", Data: jobs})
}

// authorize checks an action's token: from the form field "token" or an
// "Authorization: Bearer" header, compared in constant time. Actions are
// refused when no token is configured.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.Token == "" {
		s.fail(w, r, http.StatusForbidden, errors.New("actions are off: start the console with --ui-token (or "+TokenEnv+") to enable them"))
		return false
	}
	got := r.PostFormValue("token")
	if h := r.Header.Get("Authorization"); got == "" && strings.HasPrefix(h, "Bearer ") {
		got = strings.TrimPrefix(h, "Bearer ")
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Token)) != 1 {
		s.fail(w, r, http.StatusForbidden, errors.New("wrong or missing console token: nothing was done"))
		return false
	}
	return true
}

func (s *Server) retry(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.authorize(w, r) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	changed, err := s.src.store.RetryBy(ctx, id, "console")
	switch {
	case errors.Is(err, partition.ErrNotFound):
		s.fail(w, r, http.StatusNotFound, err)
		return
	case err != nil:
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	s.src.invalidate()
	flash := "retried: the " + s.cfg.Noun + " is claimable again"
	if !changed {
		flash = "nothing to retry: the " + s.cfg.Noun + " is neither quarantined nor backing off"
	}
	s.log.Info("console action", "action", "retry", s.keyAttr(), id, "changed", changed, "remote", r.RemoteAddr)
	http.Redirect(w, r, s.terms().Path(id)+"?flash="+url.QueryEscape(flash), http.StatusSeeOther)
}

// keyAttr is the log attribute naming a partition key: the noun's, as
// in contract_id.
func (s *Server) keyAttr() string { return strings.ReplaceAll(s.cfg.Noun, " ", "_") + "_id" }

func (s *Server) triggerJob(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if name == "" {
		name = r.PostFormValue("name")
	}
	if !s.authorize(w, r) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	ok, err := s.src.trigger(ctx, name)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	if !ok {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("no job %q", name))
		return
	}
	s.src.invalidate()
	s.log.Info("console action", "action", "trigger", "job", name, "remote", r.RemoteAddr)
	http.Redirect(w, r, "/jobs?flash="+url.QueryEscape("triggered "+name), http.StatusSeeOther)
}

func (s *Server) overviewJSON(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	snap, err := s.src.read(ctx)
	if err != nil {
		http.Error(w, "reading the database: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(snap.Overview)
}

// events streams the overview every refresh interval as server-sent
// events; the page script re-renders its live region on each.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	tick := s.cfg.Clock.NewTicker(s.cfg.Refresh)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Refresh*4)
		snap, err := s.src.read(ctx)
		cancel()
		if err == nil {
			b, _ := json.Marshal(snap.Overview)
			_, err = fmt.Fprintf(w, "event: overview\ndata: %s\n\n", b)
		} else {
			_, err = fmt.Fprintf(w, "event: error\ndata: %q\n\n", "database unreachable")
		}
		if err != nil || rc.Flush() != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-s.stop:
			return
		case <-tick.Chan():
		}
	}
}

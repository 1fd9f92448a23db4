package console

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/batonhq/baton/partition"
)

// Pausing from the console: token-gated actions, as retry is, on one
// partition (POST /contracts/{id}/pause, /resume) or on the console's
// whole kind (POST /pause, /resume; no id). They are recorded as the
// console's (by "console", with the form's reason) in the history.

// pausedBy returns, for a partition key, the pause in force on it: its
// own, else its kind's (key ""), else nil.
func pausedBy(pauses []partition.Pause) func(key string) *partition.Pause {
	byKey := make(map[string]*partition.Pause, len(pauses))
	for i := range pauses {
		byKey[pauses[i].Key] = &pauses[i]
	}
	return func(key string) *partition.Pause {
		if p, ok := byKey[key]; ok {
			return p
		}
		return byKey[""]
	}
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	s.pauseAction(w, r, "pause", func(ctx context.Context, keys []string) (int, error) {
		made, err := s.src.store.Pause(ctx, "console", r.PostFormValue("reason"), keys...)
		return len(made), err
	})
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) {
	s.pauseAction(w, r, "resume", func(ctx context.Context, keys []string) (int, error) {
		lifted, err := s.src.store.Resume(ctx, "console", keys...)
		return len(lifted), err
	})
}

// pauseAction authorizes the request, runs do on the partition named in
// the path (or the kind, without one) and redirects to its page with what
// happened.
func (s *Server) pauseAction(w http.ResponseWriter, r *http.Request, action string, do func(context.Context, []string) (int, error)) {
	id := r.PathValue("id")
	if !s.authorize(w, r) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	var keys []string
	what, back := "every "+s.cfg.Noun+" of kind "+s.cfg.Kind, "/"
	if id != "" {
		keys, what, back = []string{id}, "the "+s.cfg.Noun, s.terms().Path(id)
	}
	n, err := do(ctx, keys)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	s.src.invalidate()
	flash := action + "d " + what
	switch {
	case n == 0 && action == "pause":
		flash = "nothing to pause: " + what + " is paused already"
	case n == 0:
		flash = "nothing to resume: " + what + " has no pause of its own"
	}
	s.log.Info("console action", "action", action, s.keyAttr(), id, "changed", n > 0, "remote", r.RemoteAddr)
	http.Redirect(w, r, back+"?flash="+url.QueryEscape(flash), http.StatusSeeOther)
}

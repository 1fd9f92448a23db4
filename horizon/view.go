package horizon

// View is a Report in the JSON shape that "worker status --json" and the
// console show, a stable interface: fields may be added, never renamed or
// removed. Durations are in milliseconds, and lists are never null.
type View struct {
	// OldestAgeMS is the age of the oldest transaction holding back the
	// xmin horizon, null when none does (or none has a known age).
	OldestAgeMS *int64 `json:"oldest_xact_age_ms"`
	WarnAfterMS int64  `json:"warn_after_ms"`
	Warning     bool   `json:"warning"`
	Reason      string `json:"reason,omitempty"`
	// Oldest says who the oldest holder is (Holder.Describe).
	Oldest   string       `json:"oldest,omitempty"`
	Holders  []ViewHolder `json:"holders"`
	Hidden   int          `json:"hidden_sessions"`
	DeadRows int64        `json:"dead_rows"`
	Tables   []Table      `json:"tables"`
}

// ViewHolder is a holder of the horizon with its age.
type ViewHolder struct {
	Holder
	// AgeMS is Age in milliseconds, null when its age is not known.
	AgeMS *int64 `json:"age_ms"`
	// Over is set when its age is at least the warning threshold.
	Over bool `json:"past_threshold"`
}

// View is r in the shape of View.
func (r Report) View() View {
	v := View{WarnAfterMS: r.WarnAfter.Milliseconds(), Warning: r.Warning, Reason: r.Reason,
		Holders: []ViewHolder{}, Hidden: r.Hidden, DeadRows: r.DeadRows(), Tables: r.Tables}
	if v.Tables == nil {
		v.Tables = []Table{}
	}
	for _, h := range r.Holders {
		x := ViewHolder{Holder: h}
		if h.Since != nil {
			ms := h.Age.Milliseconds()
			x.AgeMS, x.Over = &ms, h.Age >= r.WarnAfter
		}
		v.Holders = append(v.Holders, x)
	}
	if o := r.Oldest(); o != nil {
		v.Oldest = o.Describe()
		if o.Since != nil {
			ms := o.Age.Milliseconds()
			v.OldestAgeMS = &ms
		}
	}
	return v
}

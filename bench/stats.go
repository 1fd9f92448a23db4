package main

import (
	"math"
	"sort"
	"time"
)

// dist summarises a sample of durations, in milliseconds.
type dist struct {
	N    int     `json:"n"`
	Min  float64 `json:"min_ms"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P95  float64 `json:"p95_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

func summarize(ds []time.Duration) dist {
	if len(ds) == 0 {
		return dist{}
	}
	ms := make([]float64, len(ds))
	for i, d := range ds {
		ms[i] = float64(d) / float64(time.Millisecond)
	}
	return summarizeMs(ms)
}

func summarizeMs(ms []float64) dist {
	if len(ms) == 0 {
		return dist{}
	}
	s := append([]float64(nil), ms...)
	sort.Float64s(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	return dist{N: len(s), Min: s[0], P50: quantile(s, 0.5), P90: quantile(s, 0.9), P95: quantile(s, 0.95), P99: quantile(s, 0.99),
		Max: s[len(s)-1], Mean: sum / float64(len(s))}
}

// quantile of sorted s, nearest rank.
func quantile(s []float64, q float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

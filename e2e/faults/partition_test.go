package faults

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// proxyFor puts a TCP proxy between a worker and the database and returns
// the proxy and the URL to reach the database through it.
func proxyFor(t *testing.T, dsn, name string) (*toxiproxy.Proxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(server, name, "127.0.0.1:0", u.Host)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	u.Host = p.Listen
	return p, u.String()
}

func addToxic(t *testing.T, p *toxiproxy.Proxy, name, kind, stream string, attrs string) {
	t.Helper()
	js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, kind, stream, attrs)
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		t.Fatalf("adding toxic %s: %v", name, err)
	}
}

func removeToxic(t *testing.T, p *toxiproxy.Proxy, name string) {
	t.Helper()
	if err := p.Toxics.RemoveToxic(context.Background(), name); err != nil {
		t.Fatalf("removing toxic %s: %v", name, err)
	}
}

// A network partition between one worker and the database (blackhole:
// nothing gets through, connections stay open), then healing. The cut-off
// worker stops by its local deadline, the others take over, and after the
// partition heals it finishes normally.
func TestNetworkPartitionBlackhole(t *testing.T) {
	for i := range schedules() {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			r := newRun(t, scenarioSeed(t))
			r.seedData(size())
			proxy, viaProxy := proxyFor(t, r.dsn, "cut")
			cut := r.start(viaProxy)
			for range 2 {
				r.start(r.dsn)
			}
			r.waitProgress(0.15 + 0.2*r.rng.Float64())
			held := r.heldBy(cut.name)
			at := r.dbNow()
			addToxic(t, proxy, "down", "timeout", "downstream", `{"timeout":0}`)
			addToxic(t, proxy, "up", "timeout", "upstream", `{"timeout":0}`)
			r.stats.fault("partition_blackhole")
			time.Sleep(2*time.Second + time.Duration(r.rng.Int64N(int64(time.Second)))) // the partition
			removeToxic(t, proxy, "down")
			removeToxic(t, proxy, "up")
			r.waitAll(3 * time.Minute)
			r.check()
			if len(held) > 0 {
				r.takeovers([]orphan{{worker: cut.name, at: at, contracts: held}})
			}
		})
	}
}

// Added latency (beyond the heartbeat interval) and connection resets on
// one worker's link: it may lose leases and retry, but nothing is lost or
// repeated and every worker finishes.
func TestNetworkLatencyAndResets(t *testing.T) {
	for i := range schedules() {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			r := newRun(t, scenarioSeed(t))
			r.seedData(size())
			slowProxy, slow := proxyFor(t, r.dsn, "slow")
			resetProxy, flaky := proxyFor(t, r.dsn, "flaky")
			r.start(slow)
			r.start(flaky)
			r.start(r.dsn)
			r.waitProgress(0.1)
			addToxic(t, slowProxy, "lag", "latency", "downstream", fmt.Sprintf(`{"latency":%d,"jitter":100}`, 150+r.rng.IntN(250)))
			r.stats.fault("latency")
			for k := 0; k < 3; k++ {
				r.waitProgress(0.2 + 0.2*float64(k))
				// reset_peer with a short timeout resets the worker's
				// connections (new and existing) with a TCP RST.
				addToxic(t, resetProxy, "rst", "reset_peer", "upstream", `{"timeout":50}`)
				r.stats.fault("conn_reset")
				time.Sleep(time.Duration(100+r.rng.IntN(400)) * time.Millisecond) // how long resets go on
				removeToxic(t, resetProxy, "rst")
			}
			removeToxic(t, slowProxy, "lag")
			r.waitAll(3 * time.Minute)
			r.check()
		})
	}
}

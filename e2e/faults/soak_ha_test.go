package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
)

// The soak under pg_auto_failover (BATON_SOAK_HA=1): the database is a
// formation of a primary and two standbys with number_sync_standbys 1
// (startSyncFormation) instead of one PostgreSQL, every process reaches it
// on a multi-host URL (target_session_attrs=read-write) through proxies of
// its own, one per node, and the database fault is a killed primary (its
// pg_autoctl and Postgres SIGKILLed) instead of a restart: the monitor
// promotes a standby, the killed node is started again and rejoins as a
// standby, and the next kill waits until all three nodes are back. It is a
// mode of its own, not part of the default soak: a failover and the rejoin
// that follows take about a minute on 2 cores, against a second or two for
// a restart.

func soakHA() bool { return os.Getenv("BATON_SOAK_HA") == "1" }

// startSoakFormation is startSoakServer for the HA mode.
func startSoakFormation(t *testing.T) (*pafCluster, string) {
	t.Helper()
	return startSyncFormation(t, "max_connections = 400")
}

// soakProxies puts a proxy of its own in front of each host of dsn and
// returns them with dsn on the proxies.
func soakProxies(t *testing.T, dsn, name string) ([]*toxiproxy.Proxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	var proxies []*toxiproxy.Proxy
	var hosts []string
	for i, h := range strings.Split(u.Host, ",") {
		one := *u
		one.Host = h
		p, via := proxyFor(t, one.String(), fmt.Sprintf("%s-%d", name, i))
		pu, err := url.Parse(via)
		if err != nil {
			t.Fatal(err)
		}
		proxies = append(proxies, p)
		hosts = append(hosts, pu.Host)
	}
	u.Host = strings.Join(hosts, ",")
	return proxies, u.String()
}

// primaryKiller kills the formation's primary now and then, waits for the
// monitor to promote a standby, starts the killed node again and waits for
// it to rejoin.
func (s *soak) primaryKiller(ctx context.Context, rng *rand.Rand) {
	c := s.paf
	for {
		sleepCtx(ctx, between(rng, s.cfg.restarts[0], s.cfg.restarts[1]))
		if ctx.Err() != nil || s.injected.Load() >= int64(s.cfg.faults) {
			return
		}
		var primary *pafNode
		for _, n := range c.nodes {
			if writable(n) {
				primary = n
			}
		}
		if primary == nil {
			s.problem("killing the primary: no node accepts writes")
			return
		}
		start := time.Now()
		primary.proc.kill()
		var promoted *pafNode
		err := pollUntil(2*time.Minute, func() bool {
			for _, n := range c.nodes {
				if n != primary && writable(n) {
					promoted = n
					return true
				}
			}
			return false
		})
		end := time.Now()
		s.logFault("ha_primary_killed", "database", "", start, end)
		if err != nil {
			states, _ := c.states()
			s.problem("%s killed: no other node accepted writes within 2 minutes (states %v)", primary.name, states)
			return
		}
		s.mu.Lock()
		s.failovers = append(s.failovers, end.Sub(start))
		s.mu.Unlock()
		primary.proc = c.start(primary.name, "run", "--pgdata", primary.dir)
		err = pollUntil(3*time.Minute, func() bool {
			states, err := c.states()
			if err != nil {
				return false
			}
			roles := map[string]int{}
			for _, st := range states {
				if st[0] == st[1] {
					roles[st[0]]++
				}
			}
			return roles["primary"] == 1 && roles["secondary"] == 2
		})
		if err != nil {
			states, _ := c.states()
			s.problem("%s killed, %s promoted: the formation not back to a primary and two secondaries within 3 minutes (states %v)",
				primary.name, promoted.name, states)
			return
		}
	}
}

// pollUntil calls ok every 200ms until it returns true or timeout passes.
// The monitor offers no notification to wait on.
func pollUntil(timeout time.Duration, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

// maxConnections reads max_connections on the primary (a check of the
// settings startSoakFormation gives the formation).
func maxConnections(ctx context.Context, dsn string) (string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	var v string
	err = conn.QueryRow(ctx, `SHOW max_connections`).Scan(&v)
	return v, err
}

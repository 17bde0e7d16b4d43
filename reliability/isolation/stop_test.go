package isolation_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testredis"
	"github.com/lockwatch/lockwatch/watchdog"
)

// stopBound is how long Stop may take while a renewal waits on a silent
// server: the documented default bound will be 2 s; 0.5 s of slack.
const stopBound = 2500 * time.Millisecond

// TestStopWithStalledServer: a server holding 10 s locks is SIGSTOPped;
// once a renewal has been sent to it (and waits for an answer that does
// not come: the client's ReadTimeout is go-redis's default 3 s), Stop must
// return within 2.5 s.
func TestStopWithStalledServer(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for Stop with a SIGSTOPped server (seconds); skipped with -short")
	}
	const ttl = 10 * time.Second
	srv := testredis.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	t.Cleanup(func() { srv.Resume(t) })
	a := newApp(t, []redis.UniversalClient{c}, appConfig{opts: []watchdog.Option{watchdog.WithSchedule("@every 500ms")}})
	sent := &sentLog{}
	c.AddHook(sent)
	var hs []*held
	for i := range 20 {
		hs = append(hs, obtainRedislock(t, c, fmt.Sprintf("iso:stop:%d", i), ttl, "server "+srv.Addr))
	}
	time.Sleep(300 * time.Millisecond)
	paused := time.Now()
	srv.Pause(t)
	deadline := paused.Add(3 * time.Second)
	for len(sent.since(paused)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no renewal sent within 3s of the SIGSTOP under @every 500ms; cannot test Stop with one in flight")
		}
		time.Sleep(10 * time.Millisecond)
	}
	inflight := sent.since(paused)[0]
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	a.wd.Stop()
	took := time.Since(start)
	if took > stopBound {
		t.Errorf("wd.Stop() with a renewal waiting on SIGSTOPped server %s took %v, want at most %v (renewal %s sent %v before Stop)",
			srv.Addr, took.Round(time.Millisecond), stopBound, inflight.args, start.Sub(inflight.at).Round(time.Millisecond))
	} else {
		t.Logf("wd.Stop() returned in %v with a renewal waiting on the stopped server since %v", took.Round(time.Millisecond), start.Sub(inflight.at).Round(time.Millisecond))
	}
	srv.Resume(t)
	releaseQuietly(hs)
}

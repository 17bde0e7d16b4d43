package isolation_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
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
	harness.SkipShort(t, "waits for Stop with a SIGSTOPped server (seconds)")
	const ttl = 10 * time.Second
	srv := testredis.Start(t)
	c := harness.Client(t, srv.Addr)
	t.Cleanup(func() { srv.Resume(t) })
	a := newApp(t, []redis.UniversalClient{c}, appConfig{opts: []watchdog.Option{watchdog.WithSchedule("@every 500ms")}})
	sent := harness.Record(c)
	var hs []*harness.Held
	for i := range 20 {
		hs = append(hs, obtainRedislock(t, c, fmt.Sprintf("iso:stop:%d", i), ttl, "server "+srv.Addr))
	}
	time.Sleep(300 * time.Millisecond)
	paused := time.Now()
	srv.Pause(t)
	deadline := paused.Add(3 * time.Second)
	for len(sent.Since(paused)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no renewal sent within 3s of the SIGSTOP under @every 500ms; cannot test Stop with one in flight")
		}
		time.Sleep(10 * time.Millisecond)
	}
	inflight := sent.Since(paused)[0]
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	a.WD.Stop()
	took := time.Since(start)
	if took > stopBound {
		t.Errorf("wd.Stop() with a renewal waiting on SIGSTOPped server %s took %v, want at most %v (renewal %s sent %v before Stop)",
			srv.Addr, took.Round(time.Millisecond), stopBound, inflight, start.Sub(inflight.At).Round(time.Millisecond))
	} else {
		t.Logf("wd.Stop() returned in %v with a renewal waiting on the stopped server since %v", took.Round(time.Millisecond), start.Sub(inflight.At).Round(time.Millisecond))
	}
	srv.Resume(t)
	harness.ReleaseQuietly(hs...)
}

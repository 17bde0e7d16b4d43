package faults_test

// A slow network and a cold connection pool: the renewal must survive a
// new connection's handshake.
//
//	LOCKWATCH_REQUIRE_REDIS=1 go test -race -count=1 -run TestColdConnectionOnSlowNetwork -v ./reliability/faults

import (
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/watchdog"
)

// TestColdConnectionOnSlowNetwork: an 800 ms lock, 25 ms latency each way
// (50 ms round trip), and one connection reset so that the pool has no warm
// connection left. Redis answers every command within ~50 ms; the lock must
// stay held, with socket timeouts and with ContextTimeoutEnabled. A new
// go-redis v9.4 connection spends three round trips (HELLO, two CLIENT
// SETINFO) before the script: when the renewal timeout (TTL/4 = 200 ms) was
// also the pipeline's context deadline, ContextTimeoutEnabled killed every
// new connection half-way and the lock was lost each time. The pipeline's
// deadline is now longer than the watchdog's wait.
func TestColdConnectionOnSlowNetwork(t *testing.T) {
	skipShort(t)
	cases := []struct {
		name string
		mode clientMode
		opts []watchdog.Option
	}{
		{name: "readtimeout=1s", mode: clientModes[0]},
		{name: "ctxtimeout", mode: clientModes[1]},
		{name: "ctxtimeout+WithTimeout(400ms)", mode: clientModes[1], opts: []watchdog.Option{watchdog.WithTimeout(400 * time.Millisecond)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, envConfig{proxy: true, client: c.mode.set})
			e.attach(c.opts...)
			hs := e.obtainAll("repro", 800*time.Millisecond)
			e.sweepNow() // on a fast network: newer go-redis releases may open a connection here
			e.setLatency(25 * time.Millisecond)
			e.proxy.Reset()
			start := time.Now()
			defer func() {
				t.Logf("after %v: stats %+v, lost %d, proxy %+v, worst lag %v", time.Since(start), e.WD.Stats(), len(e.Lost.All()), e.proxy.Stats(), e.lag.Worst())
			}()
			e.watchFor(3*time.Second, 0, e.newHeldChecker(hs, false))
		})
	}
}

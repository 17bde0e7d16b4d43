package watchdog

import (
	"encoding/json"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// SetLagFloor makes every scheduler count a lag of at least d, as if its
// process ran that late, until the returned function is called; w's
// schedulers run at once, as a late wake runs them (a scheduler learns
// its lag when it runs).
func (w *Watchdog) SetLagFloor(d time.Duration) (restore func()) {
	lagFloor.Store(int64(d))
	if v := w.view.Load(); v != nil {
		for _, c := range *v {
			for _, l := range c.allLanes() {
				l.kickDue()
			}
		}
	}
	return func() { lagFloor.Store(0) }
}

// Bubble runs f in a synctest bubble (synctest.Test) whose watchdogs
// count no wait for a CPU (runWait): in virtual time the runtime's real
// waits mean nothing, and a busy host would move the watchdog's times.
func Bubble(t *testing.T, f func(*testing.T)) {
	noRunWait.Store(true)
	defer noRunWait.Store(false)
	synctest.Test(t, f)
}

// SetStartDelay makes every renew call's goroutine wait d before it
// sends, as a starved process's goroutines start late, until the
// returned function is called.
func SetStartDelay(d time.Duration) (restore func()) {
	startDelay.Store(int64(d))
	return func() { startDelay.Store(0) }
}

// SetTellPause makes every tell call f between marking its locks told
// and cancelling their contexts, as a teller whose thread the host does
// not run, until the returned function is called.
func SetTellPause(f func()) (restore func()) {
	tellPause.Store(&f)
	return func() { tellPause.Store(nil) }
}

// SetLookPause makes every look that found a lock over several servers
// due call f before it tells it, until the returned function is called.
func SetLookPause(f func()) (restore func()) {
	lookPause.Store(&f)
	return func() { lookPause.Store(nil) }
}

// SetPassDelay makes every scheduler wait d after it wakes before its
// pass, as a host that does not run its thread, until the returned
// function is called.
func SetPassDelay(d time.Duration) (restore func()) {
	passDelay.Store(int64(d))
	return func() { passDelay.Store(0) }
}

// SetNoSpare makes every lane send its calls through the client's pool
// even when it has no connection free, as a Sentinel failover client's
// lanes do, until the returned function is called.
func SetNoSpare() (restore func()) {
	noSpare.Store(true)
	return func() { noSpare.Store(false) }
}

// SetRouteDelay makes every cluster client's router wait d before each
// routing of its locks, as a router late to run, until the returned
// function is called.
func SetRouteDelay(d time.Duration) (restore func()) {
	routeDelay.Store(int64(d))
	return func() { routeDelay.Store(0) }
}

// WarmConns is how many connections a lane has its pool hold (see
// lane.startWarm), at most half its PoolSize.
const WarmConns = warmConns

// WakeLag returns what w's wake probe measured lately.
func (w *Watchdog) WakeLag() time.Duration { return time.Duration(w.wakeLag.Load()) }

// Spin sets GOMAXPROCS to 1 and starts n goroutines that spin on the CPU,
// as a starved process's do, until the returned function is called; it
// stops them and sets GOMAXPROCS back.
func Spin(n int) (stop func()) {
	prev := runtime.GOMAXPROCS(1)
	var done atomic.Bool
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !done.Load() {
			}
		}()
	}
	return func() {
		done.Store(true)
		wg.Wait()
		runtime.GOMAXPROCS(prev)
	}
}

// LaneGoroutines counts the goroutines running a lane's scheduler or
// sweeper, in the whole process.
func LaneGoroutines() int { return laneGoroutines() }

// SetSweepWaitDelay makes Sweep wait d before it looks whether its sweep
// ended, as a caller starved of CPU is woken late, until the returned
// function is called.
func SetSweepWaitDelay(d time.Duration) (restore func()) {
	sweepWaitDelay.Store(int64(d))
	return func() { sweepWaitDelay.Store(0) }
}

// PageCounters returns st's counters and ep as the debug page's JSON
// shows them.
func PageCounters(st Stats, ep EndpointStats, now time.Time) (stats, endpoint []byte, err error) {
	if stats, err = json.Marshal(statsOf(st)); err != nil {
		return nil, nil, err
	}
	endpoint, err = json.Marshal(endpointOf(ep, now))
	return stats, endpoint, err
}

// LockTables takes the lock of every table w follows, as a goroutine that
// holds one and is not run by the host keeps it, until the returned
// function is called.
func (w *Watchdog) LockTables() (unlock func()) {
	ts := w.set.Tables()
	for _, t := range ts {
		t.Lock()
	}
	return func() {
		for _, t := range ts {
			t.Unlock()
		}
	}
}

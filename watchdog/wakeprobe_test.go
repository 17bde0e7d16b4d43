package watchdog_test

import (
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/watchdog"
)

// The wake probe sees a process that does not run when it asks to, and
// remembers it for seconds (a tell time allows for it): beside four
// spinning goroutines at GOMAXPROCS=1 the probe's timer fires late by up
// to the runtime's 10 ms time slice; tracked locks make it ask every 10 ms.
func TestWakeProbeSeesStalls(t *testing.T) {
	e := newEnv(t)
	wd := attach(t, e.reg)
	e.obtain(t, "probe", "me", time.Minute)
	time.Sleep(300 * time.Millisecond)
	quiet := wd.WakeLag()
	unspin := watchdog.Spin(4)
	time.Sleep(300 * time.Millisecond)
	unspin()
	stalled := wd.WakeLag()
	late := wd.Stats().Lateness
	time.Sleep(time.Second)
	kept := wd.WakeLag()
	t.Logf("wake probe: %v quiet, %v after 300 ms beside four spinning goroutines at GOMAXPROCS=1 (Stats().Lateness %v), %v a second later", quiet, stalled, late, kept)
	if stalled < 5*time.Millisecond || stalled <= quiet {
		t.Errorf("wake probe beside four spinning goroutines at GOMAXPROCS=1 = %v (quiet: %v), want 5ms at least and more than quiet", stalled, quiet)
	}
	if late < stalled {
		t.Errorf("Stats().Lateness after the stalls = %v, want the wake probe's %v at least", late, stalled)
	}
	if kept < stalled {
		t.Errorf("wake probe a second after the stalls = %v, want it kept (%v): a machine that stalled the process may stall it again", kept, stalled)
	}
}

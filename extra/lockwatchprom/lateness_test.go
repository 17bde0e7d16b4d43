package lockwatchprom_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/lockwatch/lockwatch/extra/lockwatchprom"
)

// lockwatch_lateness_seconds shows a process that runs the watchdog late:
// beside four goroutines spinning at GOMAXPROCS=1, the watchdog's wake
// probe (every 10 ms while a lock is tracked) is woken late by up to the
// runtime's 10 ms time slice, and the gauge says so afterwards.
func TestLateness(t *testing.T) {
	wd := newWatchdog(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(lockwatchprom.NewCollector("lockwatch", "", wd))
	spin(4, 300*time.Millisecond)
	before := wd.Stats().Lateness
	late := family(t, gather(t, reg), "lockwatch_lateness_seconds", dto.MetricType_GAUGE).GetMetric()
	t.Logf("lockwatch_lateness_seconds after 300 ms beside four spinning goroutines at GOMAXPROCS=1: %v (Stats().Lateness just before: %v)", late, before)
	if len(late) != 1 || late[0].GetGauge().GetValue() < 0.005 {
		t.Errorf("lockwatch_lateness_seconds = %v, want one series of 0.005 at least (Stats().Lateness just before: %v)", late, before)
	}
}

// spin runs n goroutines that spin for d at GOMAXPROCS=1, as a process
// starved of CPU.
func spin(n int, d time.Duration) {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
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
	time.Sleep(d)
	done.Store(true)
	wg.Wait()
}

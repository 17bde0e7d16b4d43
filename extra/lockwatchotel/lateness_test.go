package lockwatchotel_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/lockwatch/lockwatch/extra/lockwatchotel"
)

// lockwatch.lateness shows a process that runs the watchdog late: beside
// four goroutines spinning at GOMAXPROCS=1, the watchdog's wake probe
// (every 10 ms while a lock is tracked) is woken late by up to the
// runtime's 10 ms time slice, and the gauge says so afterwards.
func TestLateness(t *testing.T) {
	wd := newWatchdog(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	if err := lockwatchotel.InstrumentMetrics(wd, lockwatchotel.WithMeterProvider(mp)); err != nil {
		t.Fatalf("InstrumentMetrics = %v, want nil", err)
	}
	spin(4, 300*time.Millisecond)
	before := wd.Stats().Lateness
	got := gauge[float64](t, collect(t, reader), lockwatchotel.MetricLateness)
	t.Logf("%s after 300 ms beside four spinning goroutines at GOMAXPROCS=1: %+v (Stats().Lateness just before: %v)", lockwatchotel.MetricLateness, got, before)
	if len(got) != 1 || got[0].Value < 0.005 {
		t.Errorf("%s = %+v, want one point of 0.005 s at least (Stats().Lateness just before: %v)", lockwatchotel.MetricLateness, got, before)
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

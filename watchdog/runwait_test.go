package watchdog

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// runWait sees goroutines that wait for a CPU behind spinning ones, as the
// calls of a starved process do, and not an idle process's.
func TestRunWaitSeesStarvation(t *testing.T) {
	var g runWait
	// A goroutine woken by a timer over and over, as answers wake the
	// calls' goroutines: the runtime samples one scheduling in eight.
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			time.Sleep(200 * time.Microsecond)
		}
	}()
	quiet := time.Duration(0)
	for range 10 {
		time.Sleep(runWaitEvery)
		quiet = g.get(time.Now())
	}
	unspin := Spin(4)
	starved := time.Duration(0)
	for i := 0; i < 50 && starved < 5*time.Millisecond; i++ {
		time.Sleep(runWaitEvery)
		starved = max(starved, g.get(time.Now()))
	}
	unspin()
	stop.Store(true)
	wg.Wait()
	t.Logf("runWait: %v idle, %v beside four spinning goroutines at GOMAXPROCS=1", quiet, starved)
	if starved < 5*time.Millisecond {
		t.Errorf("runWait beside four spinning goroutines at GOMAXPROCS=1 = %v, want 5ms at least (each runs 10 ms before it is preempted)", starved)
	}
	if quiet >= starved {
		t.Errorf("runWait idle = %v, not less than starved (%v)", quiet, starved)
	}
}

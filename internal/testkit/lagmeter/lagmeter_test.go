package lagmeter

import (
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRecordSinceWorst(t *testing.T) {
	m := &Meter{cfg: Config{Keep: 10 * time.Second}}
	t0 := time.Now()
	m.record(t0, 5*time.Millisecond)
	m.record(t0.Add(time.Second), 3*time.Millisecond)
	if got := m.Since(t0.Add(-time.Millisecond)); got != 5*time.Millisecond {
		t.Errorf("Since(before both) = %v, want 5ms", got)
	}
	if got := m.Since(t0); got != 3*time.Millisecond {
		t.Errorf("Since(the first) = %v, want 3ms (only the later one)", got)
	}
	// Old lateness is forgotten by Since, not by Worst.
	m.record(t0.Add(m.cfg.Keep+2*time.Second), 4*time.Millisecond)
	if got := m.Since(t0.Add(-time.Millisecond)); got != 4*time.Millisecond {
		t.Errorf("Since after the first aged out = %v, want 4ms", got)
	}
	if got := m.Worst(); got != 5*time.Millisecond {
		t.Errorf("Worst() = %v, want 5ms", got)
	}
}

// The meter's goroutine ends with the test that started it.
func TestStartStopsAtCleanup(t *testing.T) {
	t.Run("meter", func(t *testing.T) {
		m := Start(t)
		time.Sleep(5 * time.Millisecond)
		if w := m.Worst(); w < 0 {
			t.Fatalf("Worst() = %v", w)
		}
	})
	goleak.VerifyNone(t)
}

func TestBetweenAndKeepAll(t *testing.T) {
	m := &Meter{} // Keep 0: every lateness is kept
	t0 := time.Now()
	m.record(t0, 50*time.Millisecond)               // stalled from t0-50ms to t0
	m.record(t0.Add(time.Hour), 5*time.Millisecond) // long after: not aged out
	if got := m.Between(t0.Add(-time.Millisecond), t0.Add(time.Minute)); got != 50*time.Millisecond {
		t.Errorf("Between(around the first) = %v, want 50ms", got)
	}
	if got := m.Between(t0.Add(time.Minute), t0.Add(2*time.Hour)); got != 5*time.Millisecond {
		t.Errorf("Between(around the second) = %v, want 5ms", got)
	}
	if got := m.Between(t0.Add(time.Minute), t0.Add(2*time.Minute)); got != 0 {
		t.Errorf("Between(neither) = %v, want 0", got)
	}
	var none *Meter
	if got := none.Since(t0) + none.Between(t0, t0) + none.Worst(); got != 0 || none.Note(time.Second) != "" {
		t.Errorf("a nil *Meter measured %v (note %q), want 0 and no note", got, none.Note(time.Second))
	}
	if got := m.Bound(10*time.Millisecond+time.Microsecond, t0.Add(time.Minute)); got != 16*time.Millisecond {
		t.Errorf("Bound(10.001ms, after the first) = %v, want 16ms (10.001 + 5, rounded up)", got)
	}
}

// A probe runs at every wake-up; New's meter stops with Stop, idempotently.
func TestNewProbeStop(t *testing.T) {
	probed := make(chan struct{}, 1)
	m := New(Config{Tick: time.Millisecond, Notable: time.Millisecond, Probe: func() {
		select {
		case probed <- struct{}{}:
		default:
		}
	}})
	<-probed
	m.Stop()
	m.Stop()
	goleak.VerifyNone(t)
}

// A stall that ends just before Between or Since is asked is counted:
// they wait for the meter's goroutine to measure it. Here the stall is a
// probe that returns 100 ms late; the question is asked the moment it is
// let go, as a test's check runs the moment a whole machine that stood
// still runs again. Seen failing without the wait (both answered 0).
func TestAskedRightAfterAStall(t *testing.T) {
	const stall = 100 * time.Millisecond
	entered := make(chan struct{})
	release := make(chan struct{})
	var once bool
	m := New(Config{Tick: time.Millisecond, Notable: 5 * time.Millisecond, Probe: func() {
		if once {
			return
		}
		once = true
		close(entered)
		<-release
	}})
	defer m.Stop()
	<-entered
	from := time.Now()
	time.Sleep(stall)
	close(release)
	to := time.Now()
	if got := m.Between(from, to); got < stall {
		t.Errorf("Between(the stall) asked as it ended = %v, want at least %v", got, stall)
	}
	if got := m.Since(from); got < stall {
		t.Errorf("Since(the stall's start) = %v, want at least %v", got, stall)
	}
}

// A thread's stall is the time it waited for a CPU over intervals in which
// it did not run, without a break: an interval in which it ran ends it,
// and so does one in which it slept (neither ran nor waited).
func TestThreadStalls(t *testing.T) {
	ms := time.Millisecond
	var times map[string]threadTimes
	var tw *threadWaits
	step := func(want time.Duration, next map[string]threadTimes) {
		t.Helper()
		times = next
		if got := tw.sample(); got != want {
			t.Errorf("sample = %v, want %v", got, want)
		}
	}
	times = map[string]threadTimes{"1": {0, 0}, "2": {0, 0}}
	tw = newThreadWaits(func() map[string]threadTimes { return times })
	step(0, map[string]threadTimes{"1": {10 * ms, 0}, "2": {0, 0}})                             // 1 ran, 2 slept
	step(10*ms, map[string]threadTimes{"1": {10 * ms, 10 * ms}, "2": {0, 0}})                   // 1 waited without running
	step(20*ms, map[string]threadTimes{"1": {10 * ms, 20 * ms}, "2": {0, 5 * ms}})              // and again; 2 waited 5 ms
	step(0, map[string]threadTimes{"1": {12 * ms, 25 * ms}, "2": {0, 5 * ms}})                  // 1 ran: its stall ended; 2 slept: its too
	step(0, map[string]threadTimes{"1": {12 * ms, 25 * ms}, "2": {0, 5 * ms}})                  // both slept
	step(8*ms, map[string]threadTimes{"1": {12 * ms, 25 * ms}, "3": {0, 0}, "2": {0, 13 * ms}}) // 2 waits again; 3 is new
	step(0, map[string]threadTimes{"3": {1 * ms, 0}})                                           // 1 and 2 are gone
	if len(tw.stall) != 1 {
		t.Errorf("stalls kept for %d threads, want 1 (the threads gone are forgotten)", len(tw.stall))
	}
}

// On Linux the meter reads this process's threads.
func TestReadSchedstat(t *testing.T) {
	got := readSchedstat()
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skipf("no /proc/self/task: %v", err)
	}
	if len(got) == 0 {
		t.Fatalf("readSchedstat() read no thread of this process")
	}
	var ran time.Duration
	for _, tt := range got {
		ran += tt.ran
	}
	if ran <= 0 {
		t.Errorf("readSchedstat() = %v: no thread has run", got)
	}
}

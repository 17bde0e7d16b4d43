package lagmeter

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRecordSinceWorst(t *testing.T) {
	m := &Meter{}
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
	m.record(t0.Add(keep+2*time.Second), 4*time.Millisecond)
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

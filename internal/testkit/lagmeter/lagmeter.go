// Package lagmeter measures how late this process's goroutines are woken:
// on a loaded machine a watchdog's timers fire late by as much, so
// real-time tests scale their tolerances by it and report it with their
// figures.
//
// The package is internal: only lockwatch's own tests use it.
package lagmeter

import (
	"sync"
	"testing"
	"time"
)

// tick is how often the meter's goroutine asks to wake up.
const tick = time.Millisecond

// keep is how long a notable lateness is remembered for Since.
const keep = 10 * time.Second

// Meter measures, with a goroutine that asks to wake up every millisecond,
// how late it is woken. Its methods are safe for concurrent use.
type Meter struct {
	mu    sync.Mutex // guards lates and worst
	lates []lateness // notable lateness of the last ten seconds
	worst time.Duration
	stop  chan struct{}
	done  chan struct{}
}

type lateness struct {
	at   time.Time
	late time.Duration
}

// Start starts a meter that t.Cleanup stops.
func Start(t testing.TB) *Meter {
	m := &Meter{stop: make(chan struct{}), done: make(chan struct{})}
	go m.run()
	t.Cleanup(func() {
		close(m.stop)
		<-m.done
	})
	return m
}

func (m *Meter) run() {
	defer close(m.done)
	timer := time.NewTimer(tick)
	defer timer.Stop()
	for {
		asked := time.Now()
		select {
		case <-m.stop:
			return
		case <-timer.C:
		}
		now := time.Now()
		timer.Reset(tick)
		if late := now.Sub(asked) - tick; late > 2*time.Millisecond {
			m.record(now, late)
		}
	}
}

func (m *Meter) record(now time.Time, late time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	kept := m.lates[:0]
	for _, l := range m.lates {
		if now.Sub(l.at) < keep {
			kept = append(kept, l)
		}
	}
	m.lates = append(kept, lateness{at: now, late: late})
	m.worst = max(m.worst, late)
}

// Since returns the longest lateness measured since t (within the last ten
// seconds).
func (m *Meter) Since(t time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var most time.Duration
	for _, l := range m.lates {
		// A lateness recorded at l.at covers the time from l.at-l.late on.
		if l.at.After(t) {
			most = max(most, l.late)
		}
	}
	return most
}

// Worst returns the longest lateness measured since the meter started.
func (m *Meter) Worst() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.worst
}

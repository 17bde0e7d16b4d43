// Package lagmeter measures how late this process's goroutines are woken:
// on a loaded machine a watchdog's timers fire late by as much, so
// real-time tests scale their tolerances by it and report it with their
// figures.
//
// The package is internal: only lockwatch's own tests use it.
package lagmeter

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// Config says how a [Meter] measures. The zero value is not useful: Tick
// must be positive.
type Config struct {
	// Tick is how often the meter's goroutine asks to wake up.
	Tick time.Duration
	// Notable is the least lateness the meter records.
	Notable time.Duration
	// Keep is how long a recorded lateness is kept; 0 keeps every one.
	Keep time.Duration
	// Probe, if not nil, runs at every wake-up before the lateness is
	// measured: a probe of something else (a PING of a server) that is
	// late counts as lateness.
	Probe func()
	// Threads, when true, counts as lateness too how long any of this
	// process's threads waited, runnable, for a CPU without running
	// (Linux's /proc/self/task/*/schedstat; nothing elsewhere). The
	// meter's own goroutine is woken on whichever thread is running: on a
	// loaded machine the operating system may leave another thread of the
	// process, with the goroutine it was running (a watchdog's
	// scheduler, say) or the lock that goroutine holds, off the CPUs for
	// hundreds of milliseconds while the meter is woken on time.
	Threads bool
}

// Meter measures, with a goroutine that asks to wake up every Tick, how
// late it is woken. Its methods are safe for concurrent use, and a nil
// *Meter (simulated time: nothing is late) measures no lateness.
type Meter struct {
	cfg   Config
	mu    sync.Mutex // guards lates and worst
	lates []lateness // notable lateness, of the last Keep
	worst time.Duration
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

type lateness struct {
	at   time.Time
	late time.Duration
}

// Start starts a meter that wakes up every millisecond, records lateness
// from 2 ms on and keeps it for ten seconds; t.Cleanup stops it.
func Start(t testing.TB) *Meter {
	m := New(Config{Tick: time.Millisecond, Notable: 2 * time.Millisecond, Keep: 10 * time.Second})
	t.Cleanup(m.Stop)
	return m
}

// StartProbe starts a meter that runs probe every tick (a PING of a
// server, say) and records, from 5 ms on, how late each probe returned
// and the meter woke: stalls of the server or of the machine it shares,
// as well as this process's. It keeps every such lateness; t.Cleanup stops
// it.
func StartProbe(t testing.TB, tick time.Duration, probe func()) *Meter {
	m := New(Config{Tick: tick, Notable: 5 * time.Millisecond, Probe: probe})
	t.Cleanup(m.Stop)
	return m
}

// New starts a meter with c; the caller stops it with [Meter.Stop].
func New(c Config) *Meter {
	m := &Meter{cfg: c, stop: make(chan struct{}), done: make(chan struct{})}
	go m.run()
	return m
}

// Stop stops the meter and waits for its goroutine; it is idempotent.
func (m *Meter) Stop() {
	m.once.Do(func() { close(m.stop) })
	<-m.done
}

func (m *Meter) run() {
	defer close(m.done)
	timer := time.NewTimer(m.cfg.Tick)
	defer timer.Stop()
	var threads *threadWaits
	if m.cfg.Threads {
		threads = newThreadWaits(readSchedstat)
	}
	for {
		asked := time.Now()
		select {
		case <-m.stop:
			return
		case <-timer.C:
		}
		if m.cfg.Probe != nil {
			m.cfg.Probe()
		}
		now := time.Now()
		timer.Reset(m.cfg.Tick)
		if late := now.Sub(asked) - m.cfg.Tick; late >= m.cfg.Notable {
			m.record(now, late)
		}
		if threads != nil {
			if late := threads.sample(); late >= m.cfg.Notable {
				m.record(now, late)
			}
		}
	}
}

func (m *Meter) record(now time.Time, late time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cfg.Keep > 0 {
		kept := m.lates[:0]
		for _, l := range m.lates {
			if now.Sub(l.at) < m.cfg.Keep {
				kept = append(kept, l)
			}
		}
		m.lates = kept
	}
	m.lates = append(m.lates, lateness{at: now, late: late})
	m.worst = max(m.worst, late)
}

// Since returns the longest lateness measured since t (of those kept).
func (m *Meter) Since(t time.Time) time.Duration {
	// A lateness recorded at l.at covers the time from l.at-l.late on.
	return m.most(func(l lateness) bool { return l.at.After(t) })
}

// Between returns the longest lateness whose stall overlapped [from, to]
// (of those kept).
func (m *Meter) Between(from, to time.Time) time.Duration {
	// A wake-up late by l.late at l.at stalled from l.at-l.late.
	return m.most(func(l lateness) bool { return l.at.After(from) && !l.at.Add(-l.late).After(to) })
}

// most returns the longest kept lateness that counts.
func (m *Meter) most(counts func(lateness) bool) time.Duration {
	if m == nil {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var most time.Duration
	for _, l := range m.lates {
		if counts(l) {
			most = max(most, l.late)
		}
	}
	return most
}

// Worst returns the longest lateness measured since the meter started.
func (m *Meter) Worst() time.Duration {
	if m == nil {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.worst
}

// Bound returns base plus the longest lateness measured since since,
// rounded up to the millisecond: a timer of the watchdog's (or of the
// test's own) is that late on a busy machine, whatever the code does.
func (m *Meter) Bound(base time.Duration, since time.Time) time.Duration {
	return (base + m.Since(since) + time.Millisecond - 1).Truncate(time.Millisecond)
}

// Note describes the lateness of the last window, for failure messages;
// it is empty for a nil *Meter.
func (m *Meter) Note(window time.Duration) string {
	if m == nil {
		return ""
	}
	return fmt.Sprintf("; this process was woken late by up to %v in the last %v", m.Since(time.Now().Add(-window)), window.Round(time.Millisecond))
}

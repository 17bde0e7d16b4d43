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
	mu    sync.Mutex // guards lates, worst and woke
	lates []lateness // notable lateness, of the last Keep
	worst time.Duration
	// woke is when the meter's goroutine last measured a wake-up: a
	// lateness that covers a time after woke is not known yet.
	woke time.Time
	stop chan struct{}
	done chan struct{}
	once sync.Once
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
		m.mu.Lock()
		m.woke = now
		m.mu.Unlock()
	}
}

// catchUp is the longest [Meter.Since] and [Meter.Between] wait for the
// meter's goroutine to measure the time they ask about.
const catchUp = 2 * time.Second

// caughtUp waits until the meter's goroutine has measured a wake-up after
// t (or now, if t is later), it has stopped, or catchUp has passed. A
// whole machine that stood still (CI's run of 2026-12-03: every test
// process, 0.8 s at one instant) wakes every goroutine at once: a test
// that asks how long it stood still must not ask before the meter has
// woken to measure it (seen: keys gone in that stall judged, the meter
// not yet woken, as lost by the watchdog).
func (m *Meter) caughtUp(t time.Time) {
	if m == nil || m.done == nil {
		return // not running: what it recorded is all there is
	}
	now := time.Now()
	if t.After(now) {
		t = now
	}
	deadline := now.Add(catchUp)
	for {
		m.mu.Lock()
		woke := m.woke
		m.mu.Unlock()
		if woke.After(t) {
			return
		}
		select {
		case <-m.done:
			return
		default:
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Millisecond)
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

// Since returns the longest lateness measured since t (of those kept),
// once the meter has measured a wake-up after the call (see caughtUp).
func (m *Meter) Since(t time.Time) time.Duration {
	// A lateness recorded at l.at covers the time from l.at-l.late on.
	m.caughtUp(time.Now())
	return m.most(func(l lateness) bool { return l.at.After(t) })
}

// Between returns the longest lateness whose stall overlapped [from, to]
// (of those kept), once the meter has measured a wake-up after to, or
// after the call if to is later.
func (m *Meter) Between(from, to time.Time) time.Duration {
	// A wake-up late by l.late at l.at stalled from l.at-l.late.
	m.caughtUp(to)
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

// NotJudged ends the test as skipped (t.Skipf), saying what it saw
// (format and args) and why it is not judged, when this process stood
// still for a third of ttl or more between from and to: a holder that
// does not run cannot renew, and no watchdog inside it can keep a lock of
// ttl through that (README's "What no watchdog can do"; a renewal keeps
// the third of invariant I2). It returns when the process ran. CI's run
// of 2026-12-03: every test process stood still 0.8 s at one instant, and
// locks of 1 s expired in four packages.
func (m *Meter) NotJudged(t testing.TB, ttl time.Duration, from, to time.Time, format string, args ...any) {
	t.Helper()
	if stall := m.Between(from, to); stall >= ttl/3 {
		t.Skipf("NOT JUDGED: "+format+"; this process stood still for %v within the lock's last TTL (%v; a third of it or more): no watchdog in a process that does not run can renew",
			append(args, stall.Round(time.Millisecond), ttl)...)
	}
}

package main

import (
	"context"
	"sync"
	"time"
)

// stallMeter measures how long this process, or the Redis it talks to,
// stood still: a goroutine asks to wake every tick and PINGs Redis, and
// notes how late the two together came back. Invariant I2 (a held lock
// keeps a third of its TTL) holds while the holder runs and Redis
// answers; a sample taken after either stood still for a third of the
// lock's TTL cannot judge the watchdog, and the demo says so instead of
// counting it broken (on a machine busy with a -race test suite and two
// spinning processes, the demo stood still for about a second).
type stallMeter struct {
	tick  time.Duration
	ping  func(context.Context) error
	mu    sync.Mutex // guards stalls
	stall []stall    // the stalls of the last keep
	stop  chan struct{}
	done  chan struct{}
}

type stall struct {
	end time.Time     // when the meter woke or the PING came back
	d   time.Duration // how much later than asked
}

const (
	stallTick    = 10 * time.Millisecond
	stallNotable = 10 * time.Millisecond // the least stall noted
	stallKeep    = time.Minute           // a stall is forgotten after this
)

// startStallMeter starts a meter whose probe is ping (nil: none); stop it
// with Stop.
func startStallMeter(tick time.Duration, ping func(context.Context) error) *stallMeter {
	m := &stallMeter{tick: tick, ping: ping, stop: make(chan struct{}), done: make(chan struct{})}
	go m.run()
	return m
}

func (m *stallMeter) run() {
	defer close(m.done)
	timer := time.NewTimer(m.tick)
	defer timer.Stop()
	for {
		asked := time.Now()
		select {
		case <-m.stop:
			return
		case <-timer.C:
		}
		if m.ping != nil {
			_ = call(context.Background(), m.ping)
		}
		now := time.Now()
		m.note(now, now.Sub(asked)-m.tick)
		timer.Reset(m.tick)
	}
}

// note records a stall of d that ended at end, when it is notable.
func (m *stallMeter) note(end time.Time, d time.Duration) {
	if d < stallNotable {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	kept := m.stall[:0]
	for _, s := range m.stall {
		if end.Sub(s.end) < stallKeep {
			kept = append(kept, s)
		}
	}
	m.stall = append(kept, stall{end, d})
}

// longest returns the longest stall that overlapped [from, to].
func (m *stallMeter) longest(from, to time.Time) time.Duration {
	if m == nil {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var most time.Duration
	for _, s := range m.stall {
		if s.end.After(from) && !s.end.Add(-s.d).After(to) {
			most = max(most, s.d)
		}
	}
	return most
}

// Stop stops the meter and waits for its goroutine.
func (m *stallMeter) Stop() {
	close(m.stop)
	<-m.done
}

package watchdog

import (
	"slices"
	"strings"
	"time"
)

// Stats is a snapshot of a watchdog's counters.
type Stats struct {
	// Ticks counts the schedule's activations.
	Ticks int64
	// Sweeps counts finished sweeps, endpoint by endpoint: a tick or a
	// Sweep call makes one per endpoint.
	Sweeps int64
	// Renewals counts locks renewed.
	Renewals int64
	// Lost counts locks given up, whatever the reason (OnLost calls).
	Lost int64
	// Failures counts renewal pipelines with a failed call, or that did
	// not answer in time (their locks are retried, or sent again).
	Failures int64
	// DeadlinesMissed counts renewals sent after their lock's deadline,
	// when less than a third of its TTL was left, and renewals sent
	// before it but answered after it: an endpoint that falls behind
	// (more locks due than it renews) shows here before any lock is
	// lost, and so do one that does not answer and a process too starved
	// to write its renewals or read their answers in time.
	DeadlinesMissed int64
	// Hedges counts renewal calls that had not answered when their most
	// urgent lock needed an answer: their locks were sent again, in
	// smaller calls, on other connections (the first answer counts).
	Hedges int64
	// SpareCalls counts renewal calls sent on connections of the
	// watchdog's own because the watched client's pool had no connection
	// free while a deadline was at stake (a hedge, or within 10 s of a
	// hedge or of a renewal that timed out waiting for the pool): the
	// application holds its whole pool, and the pool is too small for it
	// and its locks. Cluster and Sentinel failover clients have no such
	// connections: their renewals wait in the pool, and DeadlinesMissed
	// shows what that costs.
	SpareCalls int64
	// Unconfirmed counts locks whose holders were told they may be lost:
	// no renewal was confirmed in time, and their contexts
	// ([Watchdog.Context]) were cancelled with [ErrUnconfirmed] before
	// their keys could expire. Such a lock is not lost unless Lost says
	// so: a late answer may confirm it, and it is renewed on. A lock is
	// counted once per confirmation: confirmed late and then not
	// confirmed in time again, it is told, and counted, again. A lock
	// lost while it was being told (its contexts cancelled with the loss
	// first) is counted in Losses only.
	Unconfirmed int64
	// ToldLate counts, of those, the locks whose holders were told (a
	// [Watchdog.Context] context cancelled) after their tell key (the
	// instant their key may expire, less Redlock's clock drift
	// allowance), when another process could already have taken the key: the watchdog's scheduler ran too late, woken late or
	// kept waiting for the table lock by a goroutine the host did not run
	// (each such tell is logged at Warn, with the figures). It should stay
	// 0; when it grows the process is too starved for the TTLs it locks
	// with (see Lateness), and jobs may overlap.
	ToldLate int64
	// RenewErrors counts renew script calls that failed or were not
	// answered in time.
	RenewErrors int64
	// Losses counts Lost by reason.
	Losses Losses
	// CallbackPanics counts the panics of user callbacks (the filter,
	// OnLost, observers, the registry's subscribers) that were recovered.
	CallbackPanics int64
	// Lateness is how late this process has lately run the watchdog's
	// goroutines: the larger of how late its wake probe was woken (a
	// timer it asks for every 10 ms while locks are tracked, remembered
	// for a few seconds) and how long runnable goroutines waited for a
	// CPU (the runtime's scheduling latency, its 99th percentile, fading
	// over about a second). It is the process's doing, not Redis's: a
	// busy host, a low GOMAXPROCS, long GC pauses. The watchdog tells a
	// holder ([Watchdog.Context]) earlier by four times its lateness, up
	// to a quarter of the lock's TTL. So a Lateness past a sixteenth of
	// the shortest TTL the application locks with means the process is
	// too starved for locks that short: a stall four times as long as
	// lately may tell their holders late, or lose their locks, however
	// well Redis answers. Zero while nothing ran late.
	Lateness time.Duration
	// Tracked is the number of locks the registry tracks now.
	Tracked int
	// FastLane is the number of locks in the endpoints' fast lanes now:
	// renewed between ticks, or waiting for a retry. It counts a lock
	// obtained less than a third of its TTL ago, which the lane lists only
	// when it may first be renewed, and may for a moment count one of those
	// that was dropped.
	FastLane int
	// Endpoints has one entry per endpoint, ordered by client (in Watch
	// order), then by name.
	Endpoints []EndpointStats
}

// EndpointStats describes one Redis endpoint the watchdog renews on: a
// watched client, or one master node of a cluster client.
type EndpointStats struct {
	// Endpoint names it: the client's address, or the node's.
	Endpoint string
	// Renewed, Failed and Lost count its locks renewed, renewals failed (to
	// be retried), and locks given up.
	Renewed, Failed, Lost int64
	// Sweeps counts its finished sweeps.
	Sweeps int64
	// FastLane is the number of its locks in its fast lane (as in
	// [Stats]) and retries.
	FastLane int
	// Missed, Hedges and SpareCalls count its renewals not confirmed by
	// their deadline, its hedged calls and its calls sent on the
	// watchdog's own connections, as [Stats] counts them.
	Missed, Hedges, SpareCalls int64
	// Down is true while its renewals fail: the last pipeline failed and
	// no later one has succeeded.
	Down bool
	// LastError is the last renewal error it gave; nil when none.
	LastError error
	// LastOK is when a pipeline last succeeded on it; zero when none has.
	LastOK time.Time
	// LastSweep is how long its last sweep took.
	LastSweep time.Duration
}

// Stats returns the watchdog's counters (the zero Stats for a nil
// *Watchdog).
func (w *Watchdog) Stats() Stats {
	if w == nil {
		return Stats{}
	}
	// Told late before told: a tell adds to unconfirmed first, so that
	// ToldLate never reads more than Unconfirmed.
	toldLate := w.toldLate.Load()
	s := Stats{
		Ticks:       w.ticks.Load(),
		Sweeps:      w.sweeps.Load(),
		Renewals:    w.renewals.Load(),
		Lost:        w.lost.Load(),
		Failures:    w.failures.Load(),
		RenewErrors: w.renewErrors.Load(),

		DeadlinesMissed: w.missed.Load(),
		Hedges:          w.hedges.Load(),
		SpareCalls:      w.spareCalls.Load(),
		Unconfirmed:     w.unconfirmed.Load(),
		ToldLate:        toldLate,
		Tracked:         w.reg.Len(),
		Lateness:        w.lateness(time.Now()),

		CallbackPanics: w.panics.Load() + w.set.Panics.Load(),
	}
	w.lossMu.Lock()
	s.Losses = w.losses
	w.lossMu.Unlock()
	for _, c := range w.clientList() {
		var eps []EndpointStats
		for _, l := range c.allLanes() {
			c.t.Lock() // guards the lane's schedule
			queued := l.listed + l.fresh
			c.t.Unlock()
			l.mu.Lock()
			ep := EndpointStats{
				Endpoint:   l.name,
				Renewed:    l.renewed.Load(),
				Failed:     l.failed.Load(),
				Lost:       l.lost.Load(),
				Sweeps:     l.sweeps.Load(),
				FastLane:   queued,
				Missed:     l.missed.Load(),
				Hedges:     l.hedges.Load(),
				SpareCalls: l.spareCalls.Load(),
				Down:       l.down,
				LastError:  l.lastErr,
				LastOK:     l.lastOK,
				LastSweep:  l.sweepTook,
			}
			l.mu.Unlock()
			s.FastLane += ep.FastLane
			eps = append(eps, ep)
		}
		slices.SortFunc(eps, func(a, b EndpointStats) int { return strings.Compare(a.Endpoint, b.Endpoint) })
		s.Endpoints = append(s.Endpoints, eps...)
	}
	return s
}

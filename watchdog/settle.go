package watchdog

import (
	"log/slog"
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

// settle applies a pipeline's answers: confirms the renewed locks, reports
// the lost ones, schedules the failed ones for a retry and the renewed
// ones that cannot wait for the next tick.
func (l *lane) settle(p *pipe) error {
	w, t := l.w, l.c.t
	sent := w.set.Since(p.sent)
	st := &settlement{l: l, p: p, next: w.nextTickNs(sent), tol: l.tolerance(), lag: l.lagNs.Load(), headroom: 1,
		retry: p.retry[:0], again: p.again[:0]}
	defer func() { // the pipeline keeps the buffers for its next use
		clear(st.retry)
		clear(st.again)
		p.retry, p.again = st.retry[:0], st.again[:0]
	}()
	l.countMissed(p.lateSince(w.set.Now()))
	t.Settle(p.entries, p.res, sent, st.apply)
	t.Lock()
	l.mu.Lock()
	l.hedging = false // a call answered in time
	if st.failed > 0 {
		// A pipeline none of whose calls succeeded, for want of an answer,
		// says the endpoint fails; one failed call among answered ones, or
		// an error reply, does not.
		l.noteFailureLocked(p.err, st.minTTL, st.renewed == 0 && endpointDown(p.err))
	}
	if st.renewed > 0 {
		l.down, l.cause = false, nil
		l.lastOK = time.Now()
	}
	l.mu.Unlock()
	now := w.set.Now()
	for _, e := range st.retry {
		l.schedule(e, now)
	}
	// Each renewed lock's next slot is computed now, from the lock as it
	// is: between t.Settle and here the table was unlocked, and the
	// holder's refresh (waiting in table.Mark for the renewal to end) may
	// have changed its TTL and slotted it by the new one. A slot computed
	// from the answer would replace that one.
	for _, e := range st.again {
		if !e.Detached() {
			l.schedule(e, renewAt(e, st.lag))
		}
	}
	t.Unlock()
	// Logged and observed once every lock has its next slot: the logger
	// and the observers are the user's, and one that is slow must not
	// hold the next renewal back (TestSlowLoggerDoesNotDelayRenewals).
	st.count()
	l.lost.Add(int64(len(st.lost)))
	w.report(st.lost...)
	if st.failed > 0 {
		l.c.failed(l, p.err)
		return p.err
	}
	return nil
}

// settlement gathers what one pipeline's answers did.
type settlement struct {
	l    *lane
	p    *pipe
	next int64 // the next tick after the pipeline was sent
	tol  time.Duration
	lag  int64 // the scheduler's recent lag

	renewed, failed int
	minTTL          time.Duration // the shortest TTL of the failed locks
	retry           []*table.Entry
	again           []*table.Entry // renewed, to be renewed again before the next tick
	lost            []loss
	headroom        float32 // the least of the renewed locks'
}

// apply takes one lock's answer, with the table locked (table.Settle's fn).
func (st *settlement) apply(i int, e *table.Entry, r int8, dropped *table.Info) {
	switch {
	case dropped != nil:
		st.l.forgetFresh(e)
		st.lost = append(st.lost, st.l.loss(e, *dropped, lossReason(r)))
	case r == table.Renewed:
		st.renewed++
		st.headroom = min(st.headroom, st.p.heads[i])
		if needsFast(e.TTL, e.Confirmed, st.next, st.tol) {
			st.again = append(st.again, e)
		} else {
			// The ticks renew it now: a fresh mark kept would have every
			// tick pass it over, and the lane's look at its fresh locks
			// list it nowhere (TestFreshLockRenewedBySweepIsLeftToTheTicks).
			st.l.forgetFresh(e)
		}
	case r == table.Failed:
		st.failed++
		if st.minTTL == 0 || e.TTL < st.minTTL {
			st.minTTL = e.TTL
		}
		e.Fail()
		st.retry = append(st.retry, e)
	}
}

// count adds the pipeline's results to the counters, logs and observers.
func (st *settlement) count() {
	l, w, p := st.l, st.l.w, st.p
	if st.renewed > 0 {
		l.renewed.Add(int64(st.renewed))
		w.renewals.Add(int64(st.renewed))
		l.logCall("watchdog: renewed", st.renewed, p)
		headroom := float64(st.headroom)
		w.each(func(o Observer) { o.Renewed(l.name, st.renewed, headroom) })
	}
	if len(st.lost) > 0 {
		l.logCall("watchdog: a renew call found locks lost", len(st.lost), p)
	}
	if st.failed > 0 {
		w.failures.Add(1)
		w.renewErrors.Add(int64(p.failed))
		l.failed.Add(int64(st.failed))
		w.o.logger.Warn("watchdog: renewal failed; retrying", "endpoint", l.name, "locks", st.failed, "err", p.err)
		w.each(func(o Observer) { o.RenewFailed(l.name, p.failed, p.err) })
	}
}

// logCall logs, at Debug, what the answer of p, a call sent, did to n
// of its locks, with its times: its round trip, how long it waited from
// its build to its send (queued), and how long its first lock had left
// then, so that a call that found its locks gone says whether it waited
// to be sent or for its answer. Nothing is computed when Debug is off.
func (l *lane) logCall(msg string, n int, p *pipe) {
	log := l.w.o.logger
	if !l.w.logging(slog.LevelDebug) {
		return
	}
	log.Debug(msg, "endpoint", l.name, "locks", n, "rtt", time.Since(p.sent), "queued", p.queued(), "least_left_at_send", p.leftAtSend())
}

// countMissed adds n deadlines missed.
func (l *lane) countMissed(n int) {
	if n > 0 {
		l.missed.Add(int64(n))
		l.w.missed.Add(int64(n))
	}
}

// lossReason is the reason a lock a renewal found gone or taken reports.
func lossReason(r int8) error {
	if r == table.Taken {
		return ErrLockTaken
	}
	return ErrLockGone
}

// settleLate applies the answer of a pipeline the lane stopped waiting
// for (abandon): a renewed lock is confirmed as of when the pipeline was
// sent, a lock found gone or taken is reported lost unless something
// confirmed it since (see table.SettleLate). An answer shows the
// endpoint answers again.
func (l *lane) settleLate(p *pipe) {
	w, t := l.w, l.c.t
	sent := w.set.Since(p.sent)
	renewed := 0
	var lost []loss
	l.countMissed(p.lateSince(w.set.Now()))
	t.SettleLate(p.entries, p.res, sent, func(i int, e *table.Entry, r int8, dropped *table.Info) {
		switch {
		case dropped != nil:
			l.forgetFresh(e)
			lost = append(lost, l.loss(e, *dropped, lossReason(r)))
		case r == table.Renewed:
			renewed++
		}
	})
	if renewed > 0 {
		l.renewed.Add(int64(renewed))
		w.renewals.Add(int64(renewed))
		l.logCall("watchdog: a late answer renewed locks", renewed, p)
		l.mu.Lock()
		l.down, l.cause = false, nil
		l.lastOK = time.Now()
		l.mu.Unlock()
		l.kickDue() // their retries may wait no more
	}
	l.lost.Add(int64(len(lost)))
	w.report(lost...)
}
